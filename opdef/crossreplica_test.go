package opdef_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/opdef"
)

// validApply returns the inputs of a valid BatchNormGradApply with x of shape
// [2,5,6,3] (C = 3 in NHWC).
func validApply() opdef.GradApplyInputs {
	return opdef.GradApplyInputs{
		YBackprop: []int64{2, 5, 6, 3}, X: []int64{2, 5, 6, 3},
		Scale: []int64{3}, Mean: []int64{3}, Variance: []int64{3},
		SumDy: []int64{3}, SumDyXmu: []int64{3}, Count: []int64{},
	}
}

func TestCheckGradApplyRules(t *testing.T) {
	checkRuleCases(t, validApply, opdef.CheckGradApply, append([]ruleCase[opdef.GradApplyInputs]{
		{"bad data_format", "NWHC", func(*opdef.GradApplyInputs) {}, "data_format", []string{"NWHC"}},
		{"y_backprop rank 3", "NHWC", func(in *opdef.GradApplyInputs) { in.YBackprop = []int64{2, 5, 3} },
			"y_backprop", []string{"4 or 5-dimensional", "[2,5,3]"}},
		{"x rank 6", "NHWC", func(in *opdef.GradApplyInputs) { in.X = []int64{2, 5, 6, 1, 1, 3} },
			"x", []string{"4 or 5-dimensional"}},
		{"scale 2-D", "NHWC", func(in *opdef.GradApplyInputs) { in.Scale = []int64{3, 1} },
			"scale", []string{"1-dimensional", "[3,1]"}},
		{"mean 0-D", "NHWC", func(in *opdef.GradApplyInputs) { in.Mean = []int64{} },
			"mean", []string{"1-dimensional", "[]"}},
		{"variance 2-D", "NHWC", func(in *opdef.GradApplyInputs) { in.Variance = []int64{1, 3} },
			"variance", []string{"1-dimensional"}},
		{"sum_dy 2-D", "NHWC", func(in *opdef.GradApplyInputs) { in.SumDy = []int64{1, 3} },
			"sum_dy", []string{"1-dimensional"}},
		{"sum_dy_xmu 0-D", "NHWC", func(in *opdef.GradApplyInputs) { in.SumDyXmu = []int64{} },
			"sum_dy_xmu", []string{"1-dimensional"}},
		{"count 1-D", "NHWC", func(in *opdef.GradApplyInputs) { in.Count = []int64{1} },
			"count", []string{"scalar", "[1]"}},
		{"x and y_backprop differ", "NHWC", func(in *opdef.GradApplyInputs) { in.YBackprop = []int64{2, 5, 7, 3} },
			"x and y_backprop", []string{"same shape", "[2,5,6,3]", "[2,5,7,3]"}},
		{"sizes checked against the NCHW channel axis", "NCHW", func(*opdef.GradApplyInputs) {},
			"scale", []string{"channels", "3", "5"}},
		{"negative dimension", "NHWC", func(in *opdef.GradApplyInputs) {
			in.X, in.YBackprop = []int64{2, -5, 6, 3}, []int64{2, -5, 6, 3}
		}, "x", []string{"[2,-5,6,3]"}},
	}, wrongSizeCases[opdef.GradApplyInputs](t, "NHWC", "scale", "mean", "variance", "sum_dy", "sum_dy_xmu")...))
}

// TestCheckGradApplyOrder breaks two rules at once and checks that the one
// checked first (the fused gradients' order) is reported.
func TestCheckGradApplyOrder(t *testing.T) {
	type inputs = opdef.GradApplyInputs
	checkRuleOrder(t, validApply, func(in inputs) error { _, err := opdef.CheckGradApply(opdef.NHWC, in); return err }, []orderRule[inputs]{
		{"y_backprop", func(in *inputs) { in.YBackprop = []int64{2, 5, 3} }},
		{"x", func(in *inputs) { in.X = []int64{2, 5, 6, 1, 1, 3} }},
		{"scale", func(in *inputs) { in.Scale = []int64{3, 1} }},
		{"sum_dy_xmu", func(in *inputs) { in.SumDyXmu = []int64{3, 1} }},
		{"count", func(in *inputs) { in.Count = []int64{2} }},
		{"x and y_backprop", func(in *inputs) { in.YBackprop = []int64{2, 5, 7, 3} }},
		{"mean", func(in *inputs) { in.Mean = []int64{4} }},
	})
}

func TestCheckGradReduceRules(t *testing.T) {
	valid := func() opdef.GradReduceInputs {
		return opdef.GradReduceInputs{YBackprop: []int64{2, 3, 4, 5, 6}, X: []int64{2, 3, 4, 5, 6}, Mean: []int64{3}}
	}
	g, err := opdef.CheckGradReduce(opdef.NCDHW, valid())
	require.NoError(t, err)
	assert.Equal(t, opdef.Geometry{N: 2, C: 3, S: 120}, g)
	g, err = opdef.CheckGradReduce(opdef.NDHWC, valid())
	require.Error(t, err, "mean sized 3, x has 6 channels last")
	startsWithName(t, err, "mean")
	assert.Zero(t, g)

	type inputs = opdef.GradReduceInputs
	checkRuleCases(t, valid, opdef.CheckGradReduce, append([]ruleCase[inputs]{
		{"bad data_format", "nchw", func(*inputs) {}, "data_format", nil},
		{"y_backprop rank 3", "NCHW", func(in *inputs) { in.YBackprop = []int64{2, 3, 4} }, "y_backprop", nil},
		{"x rank 3", "NCHW", func(in *inputs) { in.X = []int64{2, 3, 4} }, "x", nil},
		{"mean 2-D", "NCHW", func(in *inputs) { in.Mean = []int64{3, 1} }, "mean", nil},
		{"x and y_backprop differ", "NCHW", func(in *inputs) { in.YBackprop = []int64{2, 3, 4, 5, 7} }, "x and y_backprop", nil},
	}, wrongSizeCases[inputs](t, "NCHW", "mean")...))
}

func TestCheckCount(t *testing.T) {
	g := opdef.Geometry{N: 2, C: 3, S: 30}
	require.NoError(t, opdef.CheckCount(60, g), "one replica: count is R")
	require.NoError(t, opdef.CheckCount(120, g), "two replicas")
	err := opdef.CheckCount(59, g)
	requireArgumentError(t, err, "count", "60", "59")
	startsWithName(t, err, "count")
	requireArgumentError(t, opdef.CheckCount(-1, g), "count")
	require.NoError(t, opdef.CheckCount(0, opdef.Geometry{N: 0, C: 3, S: 30}), "an empty replica needs no count")
}

// TestSyncOpsStaticShapes checks the graph-time rules of the new kinds: x and
// y_backprop must be compatible, the rest waits for data_format at run time.
func TestSyncOpsStaticShapes(t *testing.T) {
	reduce, ok := byName("Gobn>BatchNormGradReduce")
	require.True(t, ok)
	apply, ok := byName("Gobn>BatchNormGradApply")
	require.True(t, ok)
	assert.Equal(t, opdef.ShapeRule{Scalar: true}, reduce.Outputs[2].Shape)
	assert.Equal(t, opdef.ShapeRule{Like: 2}, reduce.Outputs[0].Shape)
	assert.Equal(t, opdef.ShapeRule{Like: 1}, apply.Outputs[0].Shape)
	assert.Equal(t, []int{0}, apply.Inputs[7].Ranks)
	assert.Equal(t, "int64", apply.Inputs[7].Type)
	assert.Equal(t, "BatchNormGradApply", apply.BaseName())
	assert.Empty(t, apply.Stock)

	require.NoError(t, reduce.CheckStaticShapes([][]int64{{2, -1, 4, 3}, {2, 5, 4, 3}, {7}}))
	require.NoError(t, reduce.CheckStaticShapes([][]int64{nil, nil, nil}))
	err := reduce.CheckStaticShapes([][]int64{{2, 5, 4, 3}, {2, 6, 4, 3}, {3}})
	requireArgumentError(t, err, "same shape")
	startsWithName(t, err, "x and y_backprop")

	dims := [][]int64{{2, 5, 4, 3}, {2, 5, 4, 3}, {3}, {3}, {3}, {3}, {3}, {}}
	require.NoError(t, apply.CheckStaticShapes(dims))
	dims[0] = []int64{2, 5, 4, 3, 1}
	requireArgumentError(t, apply.CheckStaticShapes(dims), "same shape")
}
