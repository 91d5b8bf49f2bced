package reference

import "slices"

// FusedChannels is FusedBatchNormGrad's answer per channel: x_backprop's
// terms and the two 1-D outputs.
type FusedChannels struct {
	XBackprop                     Activation
	ScaleBackprop, OffsetBackprop []float64
}

// FusedGradFromSums returns FusedBatchNormGrad's (every version's) answer
// from a batch's sums over its count = R elements a channel, with
// c = 1/sqrt(σ²+ε):
//
//	offset_backprop = Σdy
//	scale_backprop  = c · Σdy·(x−μ)
//	x_backprop      = scale·c · (dy − Σdy/R − (x−μ)·c²·Σdy·(x−μ)/R)   (training: GradApply)
//	x_backprop      = dy · scale · c                                   (inference)
func FusedGradFromSums(s Sums, count int64, scale, mean, variance []float64, epsilon float64, training bool) FusedChannels {
	inv := InvStd(variance, epsilon)
	f := FusedChannels{ScaleBackprop: make([]float64, len(inv)), OffsetBackprop: slices.Clone(s.Dy)}
	for c := range inv {
		f.ScaleBackprop[c] = inv[c] * s.DyXmu[c]
	}
	if training {
		f.XBackprop = GradApply(s, count, scale, mean, variance, epsilon)
	} else {
		f.XBackprop = inference(scale, mean, variance, epsilon)
	}
	return f
}

// Fused is FusedBatchNormGrad's outputs.
type Fused struct {
	XBackprop, ScaleBackprop, OffsetBackprop []float64
	// XBackpropMagnitude is the largest finite Activation.Magnitude over
	// x_backprop's elements.
	XBackpropMagnitude float64
}

// FusedGrad computes FusedBatchNormGrad's outputs over sh (see
// FusedGradFromSums), the arguments in the op's order: y_backprop, x,
// scale, reserve_space_1 (μ) and reserve_space_2 (σ²).
func FusedGrad(sh Shape, dy, x, scale, mean, variance []float64, epsilon float64, training bool) Fused {
	f := FusedGradFromSums(GradReduce(sh, dy, x, mean), int64(sh.PerChannel()), scale, mean, variance, epsilon, training)
	out := Fused{ScaleBackprop: f.ScaleBackprop, OffsetBackprop: f.OffsetBackprop}
	out.XBackprop, out.XBackpropMagnitude = f.XBackprop.Apply(sh, dy, x)
	return out
}

// The FusedBatchNormGrad kind in the GPU check: training and inference,
// each over a tensor past 2³¹ elements too; the statistics drawn (a batch's,
// or a population's), which stock's GPU kernels take in training as
// 1/sqrt(σ²+ε) where its CPU kernels take σ².
var _ = register("FusedBatchNormGrad", Kind{
	Modes: []Mode{
		{Name: "training", Attrs: map[string]any{"epsilon": checkEpsilon, "is_training": true}, Huge: true},
		{Name: "inference", Attrs: map[string]any{"epsilon": checkEpsilon, "is_training": false}, Huge: true},
	},
	Draws: map[string]Draw{"scale": {Scale: 1}, "reserve_space_1": {Scale: 0.5},
		"reserve_space_2": {Uniform: true, Scale: 1.75, Shift: 0.25}},
	OnGPU: func(mode Mode, in Inputs) map[string][]float64 {
		if !mode.Attrs["is_training"].(bool) {
			return nil
		}
		return map[string][]float64{"reserve_space_2": InvStd(in.Vectors["reserve_space_2"], in.Float("epsilon"))}
	},
	Want: func(mode Mode, in Inputs) Channelwise {
		v := in.Vectors
		return dyXmu("y_backprop", "x", v["reserve_space_1"], func(s Sums) Outputs {
			f := FusedGradFromSums(s, in.R, v["scale"], v["reserve_space_1"], v["reserve_space_2"], in.Float("epsilon"),
				in.Bool("is_training"))
			return Outputs{Vectors: map[string][]float64{"scale_backprop": f.ScaleBackprop, "offset_backprop": f.OffsetBackprop},
				Activations: map[string]func(int, []float64) float64{"x_backprop": activationOf(f.XBackprop)}}
		})
	},
})
