package reference

// GradApply returns BatchNormGradApply's x_backprop: the training
// x_backprop with the sums and element count of every replica,
//
//	x_backprop = scale·c·(dy − sum_dy/count − (x−μ)·c²·sum_dy_xmu/count)
//
// with c = 1/sqrt(σ²+ε). With count 0, for a tensor of no elements, it is
// scale·c·dy, so that no term divides by zero.
func GradApply(s Sums, count int64, scale, mean, variance []float64, epsilon float64) Activation {
	a := inference(scale, mean, variance, epsilon)
	if count == 0 {
		return a
	}
	inv := InvStd(variance, epsilon)
	a.MeanDy, a.Slope = make([]float64, len(inv)), make([]float64, len(inv))
	for c := range inv {
		a.MeanDy[c] = s.Dy[c] / float64(count)
		a.Slope[c] = inv[c] * inv[c] * s.DyXmu[c] / float64(count)
	}
	return a
}

// The GradApply kind in the GPU check: sums over one replica's elements,
// and (in the small groups) over four replicas' (a count that is not R;
// 7 for an empty tensor, which needs none).
var _ = register("GradApply", Kind{
	Modes: []Mode{
		{Name: "training", Attrs: map[string]any{"epsilon": checkEpsilon}},
		{Name: "replicas_4", Attrs: map[string]any{"epsilon": checkEpsilon}, SmallOnly: true},
	},
	Draws: map[string]Draw{"scale": {Scale: 1}, "mean": {Scale: 0.5}, "variance": {Uniform: true, Scale: 1.75, Shift: 0.25},
		"sum_dy": {Scale: 1, CountScaled: true}, "sum_dy_xmu": {Scale: 1, CountScaled: true}},
	Count: func(mode Mode, R int64) int64 {
		if mode.Name == "training" {
			return R
		}
		if R == 0 {
			return 7
		}
		return 4 * R
	},
	Want: func(mode Mode, in Inputs) Channelwise {
		v := in.Vectors
		a := GradApply(Sums{Dy: v["sum_dy"], DyXmu: v["sum_dy_xmu"]}, in.Count, v["scale"], v["mean"], v["variance"],
			in.Float("epsilon"))
		return Channelwise{Elements: []string{"y_backprop", "x"},
			Outputs: func([][]float64) Outputs {
				return Outputs{Activations: map[string]func(int, []float64) float64{"x_backprop": activationOf(a)}}
			}}
	},
})
