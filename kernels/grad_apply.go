package kernels

import "fmt"

// GradApplyArgs are the arguments of GradApply (BatchNormGradApply), the
// second half of the synchronized gradient (grad_reduce.go says how the
// halves make it).
type GradApplyArgs[T Element] struct {
	Dims Dims
	// YBackprop and X have Dims.Len() elements in Dims.Layout.
	YBackprop, X []T
	// Scale, Mean (μ), Variance (biased σ²), SumDy and SumDyXmu (the sums of
	// GradReduce over every replica) have Dims.C elements.
	Scale, Mean, Variance, SumDy, SumDyXmu []float32
	// Count is R over every replica: positive when the tensor is not empty.
	Count   int64
	Epsilon float32
	// XBackprop has Dims.Len() elements, and may be YBackprop or X itself
	// (see the package doc).
	XBackprop []T
}

// GradApply computes, with c = 1/sqrt(σ²+ε) and R = Count,
//
//	x_backprop = scale·c · (dy − sum_dy/R − (x−μ)·c²·sum_dy_xmu/R)
//
// which is applyAffine with A = scale·c, MeanDy = sum_dy/R and
// B = −scale·c³·sum_dy_xmu/R, the coefficients formed in float64. It panics
// if slice lengths disagree with Dims, or if Count is not positive for a
// tensor that is not empty.
func GradApply[T Element](g GradApplyArgs[T]) {
	n, C := g.Dims.Len(), int(g.Dims.C)
	checkLengths(g.Dims, [][]T{g.YBackprop, g.X, g.XBackprop},
		[][]float32{g.Scale, g.Mean, g.Variance, g.SumDy, g.SumDyXmu})
	if n == 0 {
		return
	}
	if g.Count <= 0 {
		panic(fmt.Sprintf("kernels: count %d, want a positive count", g.Count))
	}
	R := float64(g.Count)
	s := getScratch()
	defer s.release()
	t := newAffine(s, toFloat64(s, g.Mean))
	invStds(t.A, g.Variance, g.Epsilon) // each c's 1/sqrt(σ²+ε), until A[c] is set below
	for c := range C {
		inv := t.A[c]
		k := float64(g.Scale[c]) * inv
		t.A[c] = k
		t.B[c] = -k * inv * inv * float64(g.SumDyXmu[c]) / R
		t.MeanDy[c] = float64(g.SumDy[c]) / R
	}
	applyAll(s, plan(g.Dims, jobApply, g.YBackprop, g.X, g.XBackprop), t, g.YBackprop, g.X, g.XBackprop)
}
