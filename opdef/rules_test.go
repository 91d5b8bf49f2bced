package opdef_test

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/opdef"
)

// validFused returns the inputs of a valid fused gradient with x of shape
// [2,5,6,3] (C = 3 in NHWC).
func validFused() opdef.FusedGradInputs {
	return opdef.FusedGradInputs{
		YBackprop:     []int64{2, 5, 6, 3},
		X:             []int64{2, 5, 6, 3},
		Scale:         []int64{3},
		ReserveSpace1: []int64{3},
		ReserveSpace2: []int64{3},
	}
}

// requireArgumentError checks that err is an *opdef.ArgumentError whose
// message contains each of the given fragments.
func requireArgumentError(t *testing.T, err error, fragments ...string) {
	t.Helper()
	require.Error(t, err)
	var argErr *opdef.ArgumentError
	require.True(t, errors.As(err, &argErr), "error %q is %T, want *opdef.ArgumentError", err, err)
	assert.Equal(t, argErr.Msg, err.Error())
	for _, f := range fragments {
		assert.Contains(t, err.Error(), f)
	}
}

// startsWithName checks that the message begins with the name of the tensor
// it is about, so that no other tensor's name can satisfy a Contains check.
func startsWithName(t *testing.T, err error, name string) {
	t.Helper()
	msg := err.Error()
	assert.True(t, strings.HasPrefix(msg, name+" ") || strings.HasPrefix(msg, name+":"),
		"message %q does not start with the tensor name %q", msg, name)
}

// ruleCase is one broken rule: edit breaks valid inputs, and check's error
// must start with the name tensor and contain fragments.
type ruleCase[I any] struct {
	name      string
	format    string
	edit      func(*I)
	tensor    string
	fragments []string
}

// checkRuleCases runs check on valid inputs broken by each case.
func checkRuleCases[I any](t *testing.T, valid func() I, check func(format string, in I) (opdef.Geometry, error), cases []ruleCase[I]) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := valid()
			tc.edit(&in)
			g, err := check(tc.format, in)
			requireArgumentError(t, err, tc.fragments...)
			startsWithName(t, err, tc.tensor)
			assert.Zero(t, g, "geometry returned with an error")
		})
	}
}

// wrongSizeCases returns, for each named per-channel input, the cases that
// size it 0, 2 and 4 where the valid inputs' x has 3 channels in format:
// each error must name that input and both sizes. The input's field in I is
// the tensor's name in CamelCase (reserve_space_1: ReserveSpace1).
func wrongSizeCases[I any](t *testing.T, format string, tensors ...string) []ruleCase[I] {
	var cases []ruleCase[I]
	for _, tensor := range tensors {
		var field string
		for _, part := range strings.Split(tensor, "_") {
			field += strings.ToUpper(part[:1]) + part[1:]
		}
		_, ok := reflect.TypeFor[I]().FieldByName(field)
		require.True(t, ok, "%s: no field %s", tensor, field)
		for _, size := range []int64{0, 2, 4} {
			cases = append(cases, ruleCase[I]{
				name:   fmt.Sprintf("%s of size %d", tensor, size),
				format: format,
				edit: func(in *I) {
					reflect.ValueOf(in).Elem().FieldByName(field).Set(reflect.ValueOf([]int64{size}))
				},
				tensor:    tensor,
				fragments: []string{"channels", fmt.Sprintf("got %d and 3", size)},
			})
		}
	}
	return cases
}

// orderRule is one rule broken alone: edit breaks only it, and the error
// must start with the name tensor.
type orderRule[I any] struct {
	tensor string
	edit   func(*I)
}

// checkRuleOrder requires check to report each rule broken alone, and of
// each two broken together the one listed first (but for two that edit the
// same input, which cannot both hold).
func checkRuleOrder[I any](t *testing.T, valid func() I, check func(I) error, rules []orderRule[I]) {
	edited := make([]map[int]bool, len(rules)) // the fields of I each rule edits
	for i, r := range rules {
		in := valid()
		r.edit(&in)
		err := check(in)
		require.Error(t, err, "rule %d", i)
		startsWithName(t, err, r.tensor)
		got, want := reflect.ValueOf(in), reflect.ValueOf(valid())
		edited[i] = map[int]bool{}
		for k := range got.NumField() {
			if !reflect.DeepEqual(got.Field(k).Interface(), want.Field(k).Interface()) {
				edited[i][k] = true
			}
		}
	}
	for i := range rules {
		for j := i + 1; j < len(rules); j++ {
			if slices.ContainsFunc(slices.Collect(maps.Keys(edited[i])), func(k int) bool { return edited[j][k] }) {
				continue
			}
			t.Run(fmt.Sprintf("%d %s before %d %s", i, rules[i].tensor, j, rules[j].tensor), func(t *testing.T) {
				in := valid()
				rules[j].edit(&in)
				rules[i].edit(&in)
				err := check(in)
				requireArgumentError(t, err)
				startsWithName(t, err, rules[i].tensor)
			})
		}
	}
}

func TestCheckFusedGradRules(t *testing.T) {
	checkRuleCases(t, validFused, opdef.CheckFusedGrad, append([]ruleCase[opdef.FusedGradInputs]{
		{"y_backprop rank 3", "NHWC", func(in *opdef.FusedGradInputs) { in.YBackprop = []int64{2, 5, 3} },
			"y_backprop", []string{"4 or 5-dimensional", "[2,5,3]"}},
		{"y_backprop rank 6", "NHWC", func(in *opdef.FusedGradInputs) { in.YBackprop = []int64{2, 5, 6, 1, 1, 3} },
			"y_backprop", []string{"4 or 5-dimensional", "[2,5,6,1,1,3]"}},
		{"y_backprop rank 0", "NHWC", func(in *opdef.FusedGradInputs) { in.YBackprop = []int64{} },
			"y_backprop", []string{"4 or 5-dimensional", "[]"}},
		{"x rank 3", "NHWC", func(in *opdef.FusedGradInputs) { in.X = []int64{2, 5, 3} },
			"x", []string{"4 or 5-dimensional", "[2,5,3]"}},
		{"x rank 6", "NCHW", func(in *opdef.FusedGradInputs) { in.X = []int64{2, 3, 5, 6, 1, 1} },
			"x", []string{"4 or 5-dimensional", "[2,3,5,6,1,1]"}},
		{"scale 2-D", "NHWC", func(in *opdef.FusedGradInputs) { in.Scale = []int64{3, 1} },
			"scale", []string{"1-dimensional", "[3,1]"}},
		{"scale 0-D", "NHWC", func(in *opdef.FusedGradInputs) { in.Scale = []int64{} },
			"scale", []string{"1-dimensional", "[]"}},
		{"reserve_space_1 2-D", "NHWC", func(in *opdef.FusedGradInputs) { in.ReserveSpace1 = []int64{1, 3} },
			"reserve_space_1", []string{"1-dimensional", "[1,3]"}},
		{"reserve_space_2 2-D", "NHWC", func(in *opdef.FusedGradInputs) { in.ReserveSpace2 = []int64{3, 3} },
			"reserve_space_2", []string{"1-dimensional", "[3,3]"}},
		{"x and y_backprop differ", "NHWC", func(in *opdef.FusedGradInputs) { in.YBackprop = []int64{2, 5, 7, 3} },
			"x and y_backprop", []string{"same shape", "[2,5,6,3]", "[2,5,7,3]"}},
		{"x and y_backprop differ in rank", "NHWC", func(in *opdef.FusedGradInputs) { in.YBackprop = []int64{2, 5, 6, 1, 3} },
			"x and y_backprop", []string{"same shape", "[2,5,6,3]", "[2,5,6,1,3]"}},
		{"sizes checked against the NCHW channel axis", "NCHW", func(*opdef.FusedGradInputs) {},
			"scale", []string{"channels", "3", "5"}},
		{"bad data_format", "NWHC", func(*opdef.FusedGradInputs) {},
			"data_format", []string{"NWHC"}},
		{"empty data_format", "", func(*opdef.FusedGradInputs) {},
			"data_format", nil},
		{"lower-case data_format", "nhwc", func(*opdef.FusedGradInputs) {},
			"data_format", []string{"nhwc"}},
		{"negative spatial dimension", "NHWC", func(in *opdef.FusedGradInputs) {
			in.X, in.YBackprop = []int64{2, -5, 6, 3}, []int64{2, -5, 6, 3}
		}, "x", []string{"[2,-5,6,3]"}},
		{"negative channel dimension", "NHWC", func(in *opdef.FusedGradInputs) {
			in.X, in.YBackprop = []int64{2, 5, 6, -3}, []int64{2, 5, 6, -3}
		}, "x", []string{"[2,5,6,-3]"}},
		{"negative batch dimension", "NHWC", func(in *opdef.FusedGradInputs) {
			in.X, in.YBackprop = []int64{-2, 5, 6, 3}, []int64{-2, 5, 6, 3}
		}, "x", []string{"[-2,5,6,3]"}},
		{"negative batch dimension NCHW", "NCHW", func(in *opdef.FusedGradInputs) {
			in.X, in.YBackprop = []int64{-2, 3, 5, 6}, []int64{-2, 3, 5, 6}
		}, "x", []string{"[-2,3,5,6]"}},
		{"element count overflows", "NHWC", func(in *opdef.FusedGradInputs) {
			in.X, in.YBackprop = []int64{1 << 40, 1 << 40, 1 << 40, 2}, []int64{1 << 40, 1 << 40, 1 << 40, 2}
			in.Scale, in.ReserveSpace1, in.ReserveSpace2 = []int64{2}, []int64{2}, []int64{2}
		}, "x", []string{"[1099511627776,1099511627776,1099511627776,2]"}},
		{"element count just over 2^63-1", "NCHW", func(in *opdef.FusedGradInputs) {
			in.X, in.YBackprop = []int64{1 << 31, 1, 1 << 31, 2}, []int64{1 << 31, 1, 1 << 31, 2}
			in.Scale, in.ReserveSpace1, in.ReserveSpace2 = []int64{1}, []int64{1}, []int64{1}
		}, "x", []string{"[2147483648,1,2147483648,2]"}},
	}, wrongSizeCases[opdef.FusedGradInputs](t, "NHWC", "scale", "reserve_space_1", "reserve_space_2")...))
}

func TestCheckFusedGradLargeValid(t *testing.T) {
	// 2^62 elements: the largest power of two that fits; rules accept it.
	in := opdef.FusedGradInputs{
		YBackprop: []int64{1 << 20, 1 << 20, 1 << 20, 4},
		X:         []int64{1 << 20, 1 << 20, 1 << 20, 4},
		Scale:     []int64{4}, ReserveSpace1: []int64{4}, ReserveSpace2: []int64{4},
	}
	g, err := opdef.CheckFusedGrad(opdef.NHWC, in)
	require.NoError(t, err)
	assert.Equal(t, opdef.Geometry{N: 1 << 20, C: 4, S: 1 << 40, ChannelsLast: true}, g)
	assert.Equal(t, int64(1)<<62, g.Elements())

	// Over 2^31 elements: sizes are int64 throughout.
	in = opdef.FusedGradInputs{
		YBackprop: []int64{3, 1 << 16, 1 << 16, 1},
		X:         []int64{3, 1 << 16, 1 << 16, 1},
		Scale:     []int64{1}, ReserveSpace1: []int64{1}, ReserveSpace2: []int64{1},
	}
	g, err = opdef.CheckFusedGrad(opdef.NHWC, in)
	require.NoError(t, err)
	assert.Equal(t, int64(3)<<32, g.Elements())
}

// TestCheckFusedGradOrder breaks two rules at once and checks that the one
// stock TensorFlow checks first is reported.
func TestCheckFusedGradOrder(t *testing.T) {
	type inputs = opdef.FusedGradInputs
	// The rules in stock order.
	checkRuleOrder(t, validFused, func(in inputs) error { _, err := opdef.CheckFusedGrad(opdef.NHWC, in); return err }, []orderRule[inputs]{
		{"y_backprop", func(in *inputs) { in.YBackprop = []int64{2, 5, 3} }},
		{"x", func(in *inputs) { in.X = []int64{2, 5, 6, 1, 1, 3} }},
		{"scale", func(in *inputs) { in.Scale = []int64{3, 1} }},
		{"reserve_space_1", func(in *inputs) { in.ReserveSpace1 = []int64{3, 1} }},
		{"reserve_space_2", func(in *inputs) { in.ReserveSpace2 = []int64{3, 1} }},
		{"x and y_backprop", func(in *inputs) { in.X = []int64{2, 5, 7, 3} }},
		{"scale", func(in *inputs) { in.Scale = []int64{4} }},
		{"reserve_space_1", func(in *inputs) { in.ReserveSpace1 = []int64{4} }},
		{"reserve_space_2", func(in *inputs) { in.ReserveSpace2 = []int64{4} }},
	})
	// A bad data_format is an attr error and comes before all shape rules.
	in := validFused()
	in.YBackprop = []int64{1}
	_, err := opdef.CheckFusedGrad("HWCN", in)
	requireArgumentError(t, err)
	startsWithName(t, err, "data_format")
}

func TestCheckFusedGradGeometry(t *testing.T) {
	for _, tc := range []struct {
		name   string
		format string
		x      []int64
		want   opdef.Geometry
	}{
		{"NHWC", opdef.NHWC, []int64{2, 5, 6, 3}, opdef.Geometry{N: 2, C: 3, S: 30, ChannelsLast: true}},
		{"NCHW", opdef.NCHW, []int64{2, 3, 5, 6}, opdef.Geometry{N: 2, C: 3, S: 30}},
		{"NDHWC", opdef.NDHWC, []int64{2, 4, 5, 6, 3}, opdef.Geometry{N: 2, C: 3, S: 120, ChannelsLast: true}},
		{"NCDHW", opdef.NCDHW, []int64{2, 3, 4, 5, 6}, opdef.Geometry{N: 2, C: 3, S: 120}},
		// Stock takes the channel axis from data_format, whatever the rank:
		// NHWC of rank 5 is channels last, NDHWC of rank 4 too.
		{"NHWC rank 5", opdef.NHWC, []int64{2, 4, 5, 6, 3}, opdef.Geometry{N: 2, C: 3, S: 120, ChannelsLast: true}},
		{"NCHW rank 5", opdef.NCHW, []int64{2, 3, 4, 5, 6}, opdef.Geometry{N: 2, C: 3, S: 120}},
		{"NDHWC rank 4", opdef.NDHWC, []int64{2, 5, 6, 3}, opdef.Geometry{N: 2, C: 3, S: 30, ChannelsLast: true}},
		{"NCDHW rank 4", opdef.NCDHW, []int64{2, 3, 5, 6}, opdef.Geometry{N: 2, C: 3, S: 30}},
		{"empty batch", opdef.NHWC, []int64{0, 5, 6, 3}, opdef.Geometry{N: 0, C: 3, S: 30, ChannelsLast: true}},
		{"empty spatial", opdef.NCHW, []int64{2, 3, 0, 6}, opdef.Geometry{N: 2, C: 3, S: 0}},
		{"N=1 H=W=1", opdef.NHWC, []int64{1, 1, 1, 3}, opdef.Geometry{N: 1, C: 3, S: 1, ChannelsLast: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			C := tc.want.C
			in := opdef.FusedGradInputs{
				YBackprop: append([]int64(nil), tc.x...), X: tc.x,
				Scale: []int64{C}, ReserveSpace1: []int64{C}, ReserveSpace2: []int64{C},
			}
			g, err := opdef.CheckFusedGrad(tc.format, in)
			require.NoError(t, err)
			assert.Equal(t, tc.want, g)
			var elements int64 = 1
			for _, d := range tc.x {
				elements *= d
			}
			assert.Equal(t, elements, g.Elements())
		})
	}
}

func TestCheckFusedGradZeroChannels(t *testing.T) {
	in := opdef.FusedGradInputs{
		YBackprop: []int64{2, 5, 6, 0}, X: []int64{2, 5, 6, 0},
		Scale: []int64{0}, ReserveSpace1: []int64{0}, ReserveSpace2: []int64{0},
	}
	g, err := opdef.CheckFusedGrad(opdef.NHWC, in)
	require.NoError(t, err)
	assert.Equal(t, opdef.Geometry{N: 2, C: 0, S: 30, ChannelsLast: true}, g)
}

func TestChannelsLast(t *testing.T) {
	for format, want := range map[string]bool{"NHWC": true, "NDHWC": true, "NCHW": false, "NCDHW": false} {
		got, err := opdef.ChannelsLast(format)
		require.NoError(t, err, format)
		assert.Equal(t, want, got, format)
	}
	for _, format := range []string{"", "HWCN", "NCHW_VECT_C", "nchw"} {
		_, err := opdef.ChannelsLast(format)
		requireArgumentError(t, err, "data_format")
	}
}

func TestShapeString(t *testing.T) {
	assert.Equal(t, "[]", opdef.ShapeString(nil))
	assert.Equal(t, "[7]", opdef.ShapeString([]int64{7}))
	assert.Equal(t, "[2,3,4]", opdef.ShapeString([]int64{2, 3, 4}))
	assert.Equal(t, "[-1,9223372036854775807]", opdef.ShapeString([]int64{-1, 1<<63 - 1}))
}

func validGlobal() opdef.GlobalNormalizationGradInputs {
	return opdef.GlobalNormalizationGradInputs{
		T:        []int64{2, 5, 6, 3},
		M:        []int64{3},
		V:        []int64{3},
		Gamma:    []int64{3},
		Backprop: []int64{2, 5, 6, 3},
	}
}

func TestCheckGlobalNormalizationGradRules(t *testing.T) {
	type inputs = opdef.GlobalNormalizationGradInputs
	checkRuleCases(t, validGlobal, func(_ string, in inputs) (opdef.Geometry, error) { return opdef.CheckGlobalNormalizationGrad(in) }, append([]ruleCase[inputs]{
		{"t rank 3", "", func(in *inputs) { in.T = []int64{2, 5, 3} }, "t", []string{"4-dimensional", "[2,5,3]"}},
		{"t rank 5", "", func(in *inputs) { in.T = []int64{2, 4, 5, 6, 3} }, "t", []string{"4-dimensional"}},
		{"t rank 6", "", func(in *inputs) { in.T = []int64{2, 4, 5, 6, 1, 3} }, "t", []string{"4-dimensional"}},
		{"m 2-D", "", func(in *inputs) { in.M = []int64{3, 1} }, "m", []string{"1-dimensional", "[3,1]"}},
		{"v 2-D", "", func(in *inputs) { in.V = []int64{1, 3} }, "v", []string{"1-dimensional", "[1,3]"}},
		{"gamma 0-D", "", func(in *inputs) { in.Gamma = []int64{} }, "gamma", []string{"1-dimensional", "[]"}},
		{"backprop rank 3", "", func(in *inputs) { in.Backprop = []int64{2, 5, 3} }, "backprop", []string{"4-dimensional", "[2,5,3]"}},
		{"backprop rank 6", "", func(in *inputs) { in.Backprop = []int64{2, 5, 6, 1, 1, 3} }, "backprop", []string{"4-dimensional"}},
		{"t and backprop differ", "", func(in *inputs) { in.Backprop = []int64{2, 5, 7, 3} },
			"t and backprop", []string{"same shape", "[2,5,6,3]", "[2,5,7,3]"}},
		{"negative dimension", "", func(in *inputs) { in.T, in.Backprop = []int64{2, 5, -6, 3}, []int64{2, 5, -6, 3} },
			"t", []string{"[2,5,-6,3]"}},
		{"negative batch dimension", "", func(in *inputs) { in.T, in.Backprop = []int64{-2, 5, 6, 3}, []int64{-2, 5, 6, 3} },
			"t", []string{"[-2,5,6,3]"}},
		{"element count overflows", "", func(in *inputs) {
			in.T, in.Backprop = []int64{1 << 40, 1 << 40, 1 << 40, 2}, []int64{1 << 40, 1 << 40, 1 << 40, 2}
			in.M, in.V, in.Gamma = []int64{2}, []int64{2}, []int64{2}
		}, "t", []string{"[1099511627776,1099511627776,1099511627776,2]"}},
	}, wrongSizeCases[inputs](t, "", "m", "v", "gamma")...))
}

func TestCheckGlobalNormalizationGradOrder(t *testing.T) {
	type inputs = opdef.GlobalNormalizationGradInputs
	checkRuleOrder(t, validGlobal, func(in inputs) error { _, err := opdef.CheckGlobalNormalizationGrad(in); return err }, []orderRule[inputs]{
		{"t", func(in *inputs) { in.T = []int64{2, 5, 3} }},
		{"m", func(in *inputs) { in.M = []int64{3, 1} }},
		{"v", func(in *inputs) { in.V = []int64{3, 1} }},
		{"gamma", func(in *inputs) { in.Gamma = []int64{3, 1} }},
		{"backprop", func(in *inputs) { in.Backprop = []int64{2, 5, 6, 1, 3} }},
		{"t and backprop", func(in *inputs) { in.Backprop = []int64{2, 5, 7, 3} }},
		{"m", func(in *inputs) { in.M = []int64{4} }},
		{"v", func(in *inputs) { in.V = []int64{4} }},
		{"gamma", func(in *inputs) { in.Gamma = []int64{4} }},
	})
}

func TestCheckGlobalNormalizationGradGeometry(t *testing.T) {
	g, err := opdef.CheckGlobalNormalizationGrad(validGlobal())
	require.NoError(t, err)
	assert.Equal(t, opdef.Geometry{N: 2, C: 3, S: 30, ChannelsLast: true}, g)

	in := opdef.GlobalNormalizationGradInputs{
		T: []int64{0, 5, 6, 3}, Backprop: []int64{0, 5, 6, 3},
		M: []int64{3}, V: []int64{3}, Gamma: []int64{3},
	}
	g, err = opdef.CheckGlobalNormalizationGrad(in)
	require.NoError(t, err)
	assert.Equal(t, opdef.Geometry{N: 0, C: 3, S: 30, ChannelsLast: true}, g)
	assert.Zero(t, g.Elements())
}

// ---------------------------------------------------------------------------
// The op table.

func argNames(args []opdef.Arg) []string {
	names := make([]string, len(args))
	for i, a := range args {
		names[i] = a.Name
	}
	return names
}

// TestAll checks each op's facts against testdata/ops.json.
func TestAll(t *testing.T) {
	want := opTable(t)
	for i, w := range want {
		op := opdef.All[i]
		t.Run(w.Name, func(t *testing.T) {
			assert.Equal(t, w.Name, op.Name)
			assert.Equal(t, w.Stock, op.Stock)
			assert.Equal(t, "Gobn>"+op.BaseName(), op.Name)
			if op.Stock != "" { // an op internal to TensorFlow starts with an underscore
				assert.Equal(t, strings.TrimPrefix(op.Stock, "_"), op.BaseName())
			}
			// python_tests/test_python_package.py checks GradientOf against TensorFlow's gradients.
			if op.GradientOf != "" {
				assert.NotEmpty(t, op.Stock, "GradientOf names the forward op whose gradient Stock is")
			}
			assert.Equal(t, w.GradientOf, op.GradientOf)
			assert.Equal(t, w.Kind, string(op.Kind))
			assert.Equal(t, w.Inputs, argNames(op.Inputs))
			assert.Equal(t, w.Outputs, argNames(op.Outputs))
			var attrs, wantAttrs []string
			for _, a := range op.Attrs {
				attrs = append(attrs, a.Name)
			}
			for _, spec := range w.Attrs {
				wantAttrs = append(wantAttrs, strings.SplitN(spec, ":", 2)[0])
			}
			assert.Equal(t, wantAttrs, attrs)
			assert.ElementsMatch(t, w.CPUKernels, bindings(op.Kernels), "CPU kernels")
			assert.ElementsMatch(t, w.GPUKernels, bindings(op.GPUKernels), "GPU kernels")
			assert.ElementsMatch(t, w.HostMemory, op.HostMemory, "host memory")
			for _, a := range append(append([]opdef.Arg(nil), op.Inputs...), op.Outputs...) {
				if a.Number != "" {
					attr, ok := op.Attr(a.Number)
					assert.True(t, ok && attr.Kind == opdef.IntAttr, "%s: %s's number is no int attr", op.Name, a.Name)
					assert.Equal(t, a.Name+": "+a.Number+" * "+a.Type, a.Spec())
					continue
				}
				assert.Equal(t, a.Name+": "+a.Type, a.Spec())
			}
			for _, a := range op.Inputs {
				assert.Empty(t, a.Number, "%s: %s: a list is an output", op.Name, a.Name)
			}
			for i, a := range op.Outputs {
				if a.Number != "" {
					assert.Equal(t, len(op.Outputs)-1, i, "%s: %s: a list is the last output", op.Name, a.Name)
				}
			}
			for _, o := range op.Outputs {
				if !o.Shape.Empty && !o.Shape.Scalar {
					assert.True(t, o.Shape.Like >= 0 && o.Shape.Like < len(op.Inputs), "output %s takes the shape of input %d", o.Name, o.Shape.Like)
				}
			}
			assert.NotEmpty(t, op.Kernels)
			got, ok := byName(w.Name)
			assert.True(t, ok)
			assert.Equal(t, op.Name, got.Name)
		})
	}
	_, ok := byName("FusedBatchNormGradV3")
	assert.False(t, ok, "ByName must not find a stock name")
}

// The attrs as stock's REGISTER_OP writes them (tensorflow/core/ops/nn_ops.cc,
// TensorFlow 2.21; the data_format lists of GetConvnetDataFormatAttrString and
// GetConvnetDataFormat2D3DAttrString), which Spec renders from the structured
// attrs; gobn's own two ops follow the same forms.
func TestAttrSpecs(t *testing.T) {
	for i, w := range opTable(t) {
		op := opdef.All[i]
		var specs []string
		for _, a := range op.Attrs {
			specs = append(specs, a.Spec())
		}
		assert.Equal(t, w.Attrs, specs, op.Name)
	}
}

// TestSpecForms: the spec forms of attrs and args no op of gobn's has yet,
// as stock's REGISTER_OP writes them (_FusedBatchNormGradEx's): an int attr
// with a minimum and a default, a string attr of any value, and an output
// that is a list of as many tensors as an int attr says.
func TestSpecForms(t *testing.T) {
	assert.Equal(t, "num_side_inputs: int >= 0 = 0",
		opdef.Attr{Name: "num_side_inputs", Kind: opdef.IntAttr, Min: new(int64(0)), Default: int64(0)}.Spec())
	assert.Equal(t, "activation_mode: string = 'Identity'",
		opdef.Attr{Name: "activation_mode", Kind: opdef.StringAttr, Default: "Identity"}.Spec())
	assert.Equal(t, "side_input_backprop: num_side_inputs * T",
		opdef.Arg{Name: "side_input_backprop", Type: "T", Number: "num_side_inputs"}.Spec())
	assert.Equal(t, "fused_batch_norm_grad_ex", opdef.Kind("FusedBatchNormGradEx").SnakeCase())
}

// TestCheckAttr: the attr values an op's kernels refuse though its spec
// takes them (a spec stock's, for the kernels enable() registers under
// stock's names): a count of a list output (Arg.Number) but 0 or 1, a
// string attr's value it does not accept (Attr.Accepts); other values and
// attrs pass.
func TestCheckAttr(t *testing.T) {
	count := opdef.Attr{Name: "num_sides", Kind: opdef.IntAttr, Min: new(int64(0)), Default: int64(0)}
	mode := opdef.Attr{Name: "mode", Kind: opdef.StringAttr, Default: "Plain", Accepts: []string{"Plain", "Fancy"}}
	free := opdef.Attr{Name: "label", Kind: opdef.StringAttr}
	other := opdef.Attr{Name: "other", Kind: opdef.IntAttr}
	op := opdef.Op{Name: "Gobn>Lists", Outputs: []opdef.Arg{{Name: "dx", Type: "T"},
		{Name: "sides", Type: "T", Number: "num_sides"}}, Attrs: []opdef.Attr{count, mode, free, other}}
	for _, ok := range []struct {
		attr  opdef.Attr
		value any
	}{{count, int64(0)}, {count, int64(1)}, {mode, "Plain"}, {mode, "Fancy"}, {free, "anything"}, {other, int64(7)},
		{opdef.Attr{Name: "epsilon", Kind: opdef.FloatAttr}, float32(2)}} {
		assert.NoError(t, op.CheckAttr(ok.attr, ok.value), "%s = %v", ok.attr.Name, ok.value)
	}
	for _, bad := range []struct {
		attr    opdef.Attr
		value   any
		message string
	}{
		{count, int64(2), "num_sides must be 0 or 1 (gobn's kernels write its list once or not at all), got 2"},
		{count, int64(-1), "num_sides must be 0 or 1 (gobn's kernels write its list once or not at all), got -1"},
		{mode, "fancy", `mode must be one of Plain, Fancy, got "fancy"`},
	} {
		err := op.CheckAttr(bad.attr, bad.value)
		requireArgumentError(t, err)
		assert.EqualError(t, err, bad.message)
	}
}

func TestAllSignatures(t *testing.T) {
	v3, ok := byName("Gobn>FusedBatchNormGradV3")
	require.True(t, ok)
	types := map[string]string{}
	for _, a := range v3.Inputs {
		types["in "+a.Name] = a.Type
	}
	for _, a := range v3.Outputs {
		types["out "+a.Name] = a.Type
	}
	assert.Equal(t, map[string]string{
		"in y_backprop": "T", "in x": "T", "in scale": "float",
		"in reserve_space_1": "U", "in reserve_space_2": "U", "in reserve_space_3": "U",
		"out x_backprop": "T", "out scale_backprop": "U", "out offset_backprop": "U",
		"out reserve_space_4": "U", "out reserve_space_5": "U",
	}, types)
	// The outputs take the shapes of x and scale, and the placeholders are [0].
	assert.Equal(t, opdef.ShapeRule{Like: 1}, v3.Outputs[0].Shape)
	assert.Equal(t, opdef.ShapeRule{Like: 2}, v3.Outputs[1].Shape)
	assert.Equal(t, opdef.ShapeRule{Like: 2}, v3.Outputs[2].Shape)
	assert.True(t, v3.Outputs[3].Shape.Empty)
	assert.True(t, v3.Outputs[4].Shape.Empty)
	assert.Equal(t, []string{"T", "U"}, typeAttrs(v3))

	v1, ok := byName("Gobn>FusedBatchNormGrad")
	require.True(t, ok)
	for _, a := range append(append([]opdef.Arg(nil), v1.Inputs...), v1.Outputs...) {
		assert.Equal(t, "T", a.Type, a.Name)
	}
	assert.Equal(t, []string{"T"}, typeAttrs(v1))

	global, ok := byName("Gobn>BatchNormWithGlobalNormalizationGrad")
	require.True(t, ok)
	assert.Equal(t, []int{4}, global.Inputs[0].Ranks)
	assert.Equal(t, []int{4}, global.Inputs[4].Ranks)
	assert.Equal(t, []string{"T"}, typeAttrs(global))

	for _, op := range opdef.All {
		for _, k := range op.Kernels {
			for name, dt := range k {
				assert.NotEqual(t, "unknown", dt.String(), "%s kernel binds %s to an unknown dtype", op.Name, name)
				assert.NotZero(t, dt.Size())
			}
		}
	}
}

func TestDType(t *testing.T) {
	for _, tc := range []struct {
		dt   opdef.DType
		name string
		size int
		enum int
	}{
		{opdef.Float, "float", 4, 1},
		{opdef.Double, "double", 8, 2},
		{opdef.BFloat16, "bfloat16", 2, 14},
		{opdef.Half, "half", 2, 19},
		{opdef.Int64, "int64", 8, 9},
	} {
		assert.Equal(t, tc.name, tc.dt.String())
		assert.Equal(t, tc.size, tc.dt.Size())
		assert.Equal(t, tc.enum, int(tc.dt), "TF_DataType value of %s", tc.name)
	}
	assert.Equal(t, "unknown", opdef.DType(3).String())
	assert.Zero(t, opdef.DType(3).Size())
}

// TestActivationAndForward checks the facts Check and the capi layer read
// from each op: its activation is an input of rank 4 or more, and an
// output forwarded from an input has that input's type and the shape of an
// input of its ranks.
func TestActivationAndForward(t *testing.T) {
	for i, w := range opTable(t) {
		op := opdef.All[i]
		assert.Equal(t, w.Activation, op.Activation, op.Name)
		act := op.InputIndex(op.Activation)
		require.GreaterOrEqual(t, act, 0, op.Name)
		require.GreaterOrEqual(t, op.Inputs[act].Ranks[0], 4, op.Name)
		assert.Equal(t, -1, op.InputIndex("no such input"))
		for _, out := range op.Outputs {
			for _, name := range out.Forward {
				i := op.InputIndex(name)
				require.GreaterOrEqual(t, i, 0, "%s: %s forwards %s", op.Name, out.Name, name)
				assert.Equal(t, out.Type, op.Inputs[i].Type, "%s: %s forwards %s", op.Name, out.Name, name)
				assert.Equal(t, op.Inputs[out.Shape.Like].Ranks, op.Inputs[i].Ranks, "%s: %s forwards %s", op.Name, out.Name, name)
			}
		}
	}
	var kinds []opdef.Kind // the table's, each once, in the order of their first op
	for _, w := range opTable(t) {
		if !slices.Contains(kinds, opdef.Kind(w.Kind)) {
			kinds = append(kinds, opdef.Kind(w.Kind))
		}
	}
	assert.Equal(t, kinds, opdef.Kinds())
	v2, _ := byName("Gobn>FusedBatchNormGradV2")
	assert.Equal(t, []opdef.DType{opdef.Half, opdef.BFloat16, opdef.Float}, v2.ArgDTypes(v2.Inputs[0]))
	assert.Equal(t, []opdef.DType{opdef.Float}, v2.ArgDTypes(v2.Inputs[2]))
	assert.Equal(t, []opdef.DType{opdef.Float}, v2.ArgDTypes(v2.Inputs[3]))
	global, _ := byName("Gobn>BatchNormWithGlobalNormalizationGrad")
	assert.Nil(t, global.ArgDTypes(global.Inputs[0]), "numbertype")
}
