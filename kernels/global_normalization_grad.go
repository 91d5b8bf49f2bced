package kernels

import "math"

// GlobalNormalizationArgs are the arguments of
// BatchNormWithGlobalNormalizationGrad. Dims.Layout must be ChannelsLast.
type GlobalNormalizationArgs[T Element] struct {
	Dims Dims
	// T (the op's input t) and Backprop have Dims.Len() elements.
	T, Backprop []T
	// M, V and Gamma (mean, variance, γ) have Dims.C elements.
	M, V, Gamma []T
	// DX has Dims.Len() elements, and may be T or Backprop itself (see the
	// package doc); DM, DV, DB and DG have Dims.C.
	DX, DM, DV, DB, DG      []T
	VarianceEpsilon         float32
	ScaleAfterNormalization bool
}

// GlobalNormalizationGrad computes the gradient of
// BatchNormWithGlobalNormalization. With s = 1/sqrt(v+ε), γ' = γ when
// scale_after_normalization and 1 otherwise, and sums over a channel:
//
//	db = Σ dy
//	dx = dy · s · γ'
//	dm = −db · s · γ'
//	dg = s · Σ dy·(t−m)            (0 without scale_after_normalization)
//	dv = −½ · s³ · γ' · Σ dy·(t−m)
//
// Sums and per-channel terms are formed in float64, whatever T is (stock
// TensorFlow sums in T, even half). It panics if slice lengths disagree with
// Dims or the layout is not ChannelsLast.
func GlobalNormalizationGrad[T Element](g GlobalNormalizationArgs[T]) {
	C := int(g.Dims.C)
	if g.Dims.Layout != ChannelsLast {
		panic("kernels: BatchNormWithGlobalNormalizationGrad is channels-last only")
	}
	checkLengths(g.Dims, [][]T{g.T, g.Backprop, g.DX}, [][]T{g.M, g.V, g.Gamma, g.DM, g.DV, g.DB, g.DG})
	sc := getScratch()
	defer sc.release()
	mean, variance, gamma := toFloat64(sc, g.M), toFloat64(sc, g.V), toFloat64(sc, g.Gamma)
	t := newAffine(sc, mean)
	t.ScaleOnly = true // dx does not involve t
	s := sc.float64s(C)
	eps := float64(g.VarianceEpsilon)
	for c := range C {
		s[c] = 1 / math.Sqrt(variance[c]+eps)
		t.A[c] = s[c]
		if g.ScaleAfterNormalization {
			t.A[c] *= gamma[c]
		}
	}
	// dx does not depend on the sums: one pass can do both (sweep).
	p := plan(g.Dims, jobSweep, g.Backprop, g.T, g.DX)
	sumDy, sumDyXc := sweep(sc, p, g.Backprop, g.T, g.DX, mean, &t, nil)
	dm, dv, dg := sc.float64s(C), sc.float64s(C), sc.float64s(C)
	for c := range C {
		k := t.A[c]
		if g.ScaleAfterNormalization {
			dg[c] = s[c] * sumDyXc[c]
		}
		dm[c] = -sumDy[c] * k
		dv[c] = -0.5 * s[c] * s[c] * k * sumDyXc[c]
	}
	fromFloat64(sc, g.DB, sumDy)
	fromFloat64(sc, g.DM, dm)
	fromFloat64(sc, g.DV, dv)
	fromFloat64(sc, g.DG, dg)
}
