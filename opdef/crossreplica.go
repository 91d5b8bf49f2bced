package opdef

// The rules of the synchronized batch-norm gradient ops, BatchNormGradReduce
// and BatchNormGradApply: Check's, as for the fused gradients, and the value
// of BatchNormGradApply's count.

// GradReduceInputs are the shapes of the inputs of BatchNormGradReduce.
type GradReduceInputs struct {
	YBackprop, X, Mean []int64
}

// CheckGradReduce is Check for BatchNormGradReduce: y_backprop and x of
// rank 4 or 5 and the same shape, mean 1-D and sized C, the channel
// dimension of x under dataFormat. It returns x's geometry.
func CheckGradReduce(dataFormat string, in GradReduceInputs) (Geometry, error) {
	return firstOf(GradReduce).Check(dataFormat, [][]int64{in.YBackprop, in.X, in.Mean})
}

// GradApplyInputs are the shapes of the inputs of BatchNormGradApply.
type GradApplyInputs struct {
	YBackprop, X, Scale, Mean, Variance, SumDy, SumDyXmu, Count []int64
}

// CheckGradApply is Check for BatchNormGradApply: y_backprop and x of rank
// 4 or 5 and the same shape; scale, mean, variance, sum_dy and sum_dy_xmu
// 1-D and sized C; count a scalar. It returns x's geometry. The value of
// count is checked by CheckCount.
func CheckGradApply(dataFormat string, in GradApplyInputs) (Geometry, error) {
	return firstOf(GradApply).Check(dataFormat,
		[][]int64{in.YBackprop, in.X, in.Scale, in.Mean, in.Variance, in.SumDy, in.SumDyXmu, in.Count})
}

// CheckCount checks the count input of BatchNormGradApply against the
// geometry of x: count is the number of elements per channel over every
// replica, so it is at least this replica's R = N·S.
func CheckCount(count int64, g Geometry) error {
	if count < g.N*g.S {
		return invalid("count must be at least the number of elements per channel of x (%d), got %d", g.N*g.S, count)
	}
	return nil
}
