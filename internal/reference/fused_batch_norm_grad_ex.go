package reference

import "fmt"

// ActivationGrad returns the gradient dz of an activation's input from the
// gradient dy of its output y, as stock's ReluGrad and Relu6Grad compute
// it: dz = dy·m, m = 1 where 0 < y (Relu), 0 < y < 6 (Relu6), always
// (Identity), else 0, so that dz is NaN where dy is NaN or infinite and m
// is 0. It panics on another mode.
func ActivationGrad(mode string, dy, y float64) float64 {
	var on bool
	switch mode {
	case "Identity":
		on = true
	case "Relu":
		on = y > 0
	case "Relu6":
		on = y > 0 && y < 6
	default:
		panic(fmt.Sprintf("reference: activation mode %q", mode))
	}
	if on {
		return dy
	}
	return dy * 0
}

// FusedGradEx computes FusedBatchNormGradEx's outputs over sh: those of
// FusedGrad on dz = ActivationGrad(mode, dy, y), the arguments in the op's
// order (y_backprop, x, scale, reserve_space_1 (μ), reserve_space_2 (σ²),
// then y), and dz itself, side_input_backprop.
func FusedGradEx(sh Shape, mode string, dy, x, scale, mean, variance, y []float64, epsilon float64,
	training bool) (f Fused, dz []float64) {
	dz = make([]float64, len(dy))
	for i := range dz {
		dz[i] = ActivationGrad(mode, dy[i], y[i])
	}
	return FusedGrad(sh, dz, x, scale, mean, variance, epsilon, training), dz
}

// The FusedBatchNormGradEx kind in the GPU check: training with Relu, with
// Identity and a side input, and inference with Relu6 and a side input; y
// drawn across 0 and 6, and the statistics as FusedBatchNormGrad's (which
// its GPU kernel takes alike).
var _ = register("FusedBatchNormGradEx", Kind{
	Modes: []Mode{
		{Name: "training_relu", Attrs: exAttrs(true, "Relu", 0), Huge: true},
		{Name: "training_identity_side", Attrs: exAttrs(true, "Identity", 1)},
		{Name: "inference_relu6_side", Attrs: exAttrs(false, "Relu6", 1), Huge: true},
	},
	Draws: map[string]Draw{"scale": {Scale: 1}, "reserve_space_1": {Scale: 0.5},
		"reserve_space_2": {Uniform: true, Scale: 1.75, Shift: 0.25}, "reserve_space_3": {Scale: 1}, "offset": {Scale: 1},
		"y": {Uniform: true, Scale: 9, Shift: -1.5}},
	OnGPU: func(mode Mode, in Inputs) map[string][]float64 { return Kinds["FusedBatchNormGrad"].OnGPU(mode, in) },
	Want: func(mode Mode, in Inputs) Channelwise {
		v, act := in.Vectors, mode.Attrs["activation_mode"].(string)
		mean := v["reserve_space_1"]
		return Channelwise{
			Elements: []string{"y_backprop", "x", "y"},
			Sums:     2,
			Accumulate: func(c int, e []float64, s []float64) {
				dz := ActivationGrad(act, e[0], e[2])
				s[0] += dz
				s[1] += dz * (e[1] - mean[c])
			},
			Outputs: func(sums [][]float64) Outputs {
				f := FusedGradFromSums(sumsOf(sums), in.R, v["scale"], mean, v["reserve_space_2"], in.Float("epsilon"),
					in.Bool("is_training"))
				dz := func(_ int, e []float64) float64 { return ActivationGrad(act, e[0], e[2]) }
				out := Outputs{Vectors: map[string][]float64{"scale_backprop": f.ScaleBackprop, "offset_backprop": f.OffsetBackprop},
					Activations: map[string]func(int, []float64) float64{
						"x_backprop": func(c int, e []float64) float64 { return f.XBackprop.At(c, dz(c, e), e[1]) },
					}}
				if mode.Attrs["num_side_inputs"].(int64) > 0 {
					out.Activations["side_input_backprop"] = dz
				}
				return out
			},
		}
	},
})

// exAttrs are the attrs of a mode of FusedBatchNormGradEx.
func exAttrs(training bool, activation string, sideInputs int64) map[string]any {
	return map[string]any{"epsilon": checkEpsilon, "is_training": training, "activation_mode": activation,
		"num_side_inputs": sideInputs}
}
