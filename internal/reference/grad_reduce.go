package reference

// GradReduce returns BatchNormGradReduce's sums over the elements of sh,
// each channel's in the order of its elements.
func GradReduce(sh Shape, dy, x, mean []float64) Sums {
	s := NewSums(sh.C)
	for i := range sh.Len() {
		c := sh.Channel(i)
		s.Add(c, dy[i], x[i], mean[c])
	}
	return s
}

// The GradReduce kind in the GPU check: the sums of one replica.
var _ = register("GradReduce", Kind{
	Modes: []Mode{{Name: "training", Attrs: map[string]any{}}},
	Draws: map[string]Draw{"mean": {Scale: 0.5}},
	Want: func(mode Mode, in Inputs) Channelwise {
		return dyXmu("y_backprop", "x", in.Vectors["mean"], func(s Sums) Outputs {
			return Outputs{Vectors: map[string][]float64{"sum_dy": s.Dy, "sum_dy_xmu": s.DyXmu}}
		})
	},
})
