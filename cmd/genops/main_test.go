package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/internal/genfile"
	"github.com/gobn/gobn/internal/recipe"
	"github.com/gobn/gobn/opdef"
)

// TestGeneratedFileIsCurrent fails (for either file) when opdef changed without `go generate ./ops`.
func TestGeneratedFileIsCurrent(t *testing.T) {
	want, err := Generate(opdef.All)
	require.NoError(t, err)
	require.NoError(t, genfile.Current("../../ops/ops_gen.go", want, "go generate ./ops"))
	want, err = GenerateTable(opdef.All)
	require.NoError(t, err)
	require.NoError(t, genfile.Current("../../ops/wrappers_gen_test.go", want, "go generate ./ops"))
}

func TestOptionNamesFollowTheBindings(t *testing.T) {
	require.Equal(t, "DataFormat", camel("data_format"))
	require.Equal(t, "IsTraining", camel("is_training"))
	require.Equal(t, "Epsilon", camel("epsilon"))
}

func TestUnknownAttrTypeIsAnError(t *testing.T) {
	op := opdef.Op{Name: "Gobn>X", Stock: "X", Attrs: []opdef.Attr{{Name: "k", Kind: opdef.AttrKind(99)}}}
	_, err := Generate([]opdef.Op{op})
	require.ErrorContains(t, err, "attr k has kind 99")
}

// TestWrapperOfANewKind: an op with an int attr, a list output and a stock
// twin internal to TensorFlow (which the bindings do not wrap) gets a
// wrapper of its own name, an option of the int attr and the list as
// []tf.Output, as long as the op's attr makes it.
func TestWrapperOfANewKind(t *testing.T) {
	src, err := Generate([]opdef.Op{recipe.Throwaway})
	require.NoError(t, err)
	for _, want := range []string{
		"func Throwaway(scope *op.Scope, y_backprop tf.Output, x tf.Output, scale tf.Output, optional ...ThrowawayAttr) (x_backprop tf.Output, side_backprop []tf.Output) {",
		"func ThrowawayNumSides(value int64) ThrowawayAttr",
		`n0, err := operation.OutputListSize("side_backprop")`,
		"side_backprop = append(side_backprop, operation.Output(1+i))",
		"return operation.Output(0), side_backprop",
	} {
		require.Contains(t, string(src), want)
	}
	table, err := GenerateTable([]opdef.Op{recipe.Throwaway})
	require.NoError(t, err)
	require.Contains(t, string(table), `"Gobn>Throwaway": {ops.Throwaway, nil, map[string][2]any{`)
}
