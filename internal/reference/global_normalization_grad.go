package reference

import "slices"

// GlobalChannels is BatchNormWithGlobalNormalizationGrad's answer per
// channel: dx's terms and the four 1-D outputs.
type GlobalChannels struct {
	DX             Activation
	DM, DV, DB, DG []float64
}

// GlobalNormalizationGradFromSums returns
// BatchNormWithGlobalNormalizationGrad's answer from the sums Σdy and
// Σdy·(t−m) of each channel, with s = 1/sqrt(v+ε) and γ' = γ when
// scaleAfterNormalization, 1 otherwise:
//
//	db = Σdy
//	dx = dy · s · γ'
//	dm = −db · s · γ'
//	dg = s · Σdy·(t−m)            (0 without scale_after_normalization)
//	dv = −½ · s³ · γ' · Σdy·(t−m)
func GlobalNormalizationGradFromSums(sums Sums, v, gamma []float64, epsilon float64, scaleAfterNormalization bool) GlobalChannels {
	inv := InvStd(v, epsilon)
	C := len(inv)
	g := GlobalChannels{DX: Activation{Gain: make([]float64, C)},
		DM: make([]float64, C), DV: make([]float64, C), DB: slices.Clone(sums.Dy), DG: make([]float64, C)}
	for c, s := range inv {
		k := s // s·γ'
		if scaleAfterNormalization {
			k *= gamma[c]
			g.DG[c] = s * sums.DyXmu[c]
		}
		g.DX.Gain[c] = k
		g.DM[c] = -sums.Dy[c] * k
		g.DV[c] = -0.5 * s * s * k * sums.DyXmu[c]
	}
	return g
}

// Global is BatchNormWithGlobalNormalizationGrad's outputs.
type Global struct {
	DX, DM, DV, DB, DG []float64
}

// GlobalNormalizationGrad computes BatchNormWithGlobalNormalizationGrad's
// outputs over sh (see GlobalNormalizationGradFromSums), the arguments in
// the op's order: t, m, v, gamma, backprop.
func GlobalNormalizationGrad(sh Shape, t, m, v, gamma, backprop []float64, epsilon float64, scaleAfterNormalization bool) Global {
	g := GlobalNormalizationGradFromSums(GradReduce(sh, backprop, t, m), v, gamma, epsilon, scaleAfterNormalization)
	dx, _ := g.DX.Apply(sh, backprop, t)
	return Global{DX: dx, DM: g.DM, DV: g.DV, DB: g.DB, DG: g.DG}
}

// The GlobalNormalizationGrad kind in the GPU check: scaled after
// normalization, over a tensor past 2³¹ elements too, and not.
var _ = register("GlobalNormalizationGrad", Kind{
	Modes: []Mode{
		{Name: "scaled", Attrs: map[string]any{"variance_epsilon": checkEpsilon, "scale_after_normalization": true}, Huge: true},
		{Name: "unscaled", Attrs: map[string]any{"variance_epsilon": checkEpsilon, "scale_after_normalization": false}},
	},
	Draws: map[string]Draw{"m": {Scale: 0.5}, "v": {Uniform: true, Scale: 1.75, Shift: 0.25}, "gamma": {Scale: 1}},
	Want: func(mode Mode, in Inputs) Channelwise {
		v := in.Vectors
		return dyXmu("backprop", "t", v["m"], func(s Sums) Outputs {
			g := GlobalNormalizationGradFromSums(s, v["v"], v["gamma"], in.Float("variance_epsilon"),
				in.Bool("scale_after_normalization"))
			return Outputs{Vectors: map[string][]float64{"dm": g.DM, "dv": g.DV, "db": g.DB, "dg": g.DG},
				Activations: map[string]func(int, []float64) float64{"dx": activationOf(g.DX)}}
		})
	},
})
