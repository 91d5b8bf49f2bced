package kernels

import "fmt"

// The training gradient of batch normalization synchronized across replicas
// (SyncBatchNorm), in two halves around an all-reduce. With μ and σ² the
// global batch mean and biased variance, and sums over a channel of every
// replica:
//
//	x_backprop = scale·c · (dy − Σdy/R − (x−μ)·c²·Σdy·(x−μ)/R),  c = 1/sqrt(σ²+ε)
//
// which is TrainingGrad's x_backprop with the sums and R taken over all
// replicas. GradReduce forms one replica's Σdy, Σdy·(x−μ) (and R is its
// Dims.PerChannel()); the caller sums them over the replicas; GradApply forms
// each replica's x_backprop from the global sums. With one replica the two
// together equal TrainingGrad.

// GradReduceArgs are the arguments of GradReduce (BatchNormGradReduce).
type GradReduceArgs[T Element] struct {
	Dims Dims
	// YBackprop and X have Dims.Len() elements in Dims.Layout.
	YBackprop, X []T
	// Mean is the global batch mean μ, Dims.C elements.
	Mean []float32
	// SumDy and SumDyXmu have Dims.C elements: Σdy and Σdy·(x−μ) over this
	// tensor's elements of each channel.
	SumDy, SumDyXmu []float32
}

// GradReduce computes, per channel c over this replica's R = N·S elements,
//
//	sum_dy[c]     = Σ dy
//	sum_dy_xmu[c] = Σ dy·(x−μ)
//
// accumulated in float64 and rounded to float32. An empty tensor gives zeros.
// It panics if slice lengths disagree with Dims.
func GradReduce[T Element](g GradReduceArgs[T]) {
	checkLengths(g.Dims, [][]T{g.YBackprop, g.X}, [][]float32{g.Mean, g.SumDy, g.SumDyXmu})
	s := getScratch()
	defer s.release()
	p := plan(g.Dims, jobReduce, g.YBackprop, g.X, nil)
	sumDy, sumDyXmu := reduce(s, p, g.YBackprop, g.X, toFloat64(s, g.Mean))
	fromFloat64(s, g.SumDy, sumDy)
	fromFloat64(s, g.SumDyXmu, sumDyXmu)
}

// GradApplyArgs are the arguments of GradApply (BatchNormGradApply).
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
