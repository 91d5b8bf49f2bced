package kernels

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
