package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/internal/genfile"
	"github.com/gobn/gobn/internal/recipe"
	"github.com/gobn/gobn/opdef"
)

// TestGeneratedFilesAreCurrent fails when opdef or internal/tolerance
// changed without `make generate`.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	for name, want := range Files() {
		require.NoError(t, genfile.Current("../../python/gobn/"+name, want, "make generate"))
	}
}

// The wrapper names TensorFlow 2.21's Python op generator gives these op
// names (_pywrap_python_op_gen.GetPythonWrappers); python_tests checks every
// gobn op's against the loaded library.
func TestWrapperName(t *testing.T) {
	for op, want := range map[string]string{
		"Gobn>FusedBatchNormGradV3":                 "gobn_fused_batch_norm_grad_v3",
		"Gobn>FusedBatchNormGrad":                   "gobn_fused_batch_norm_grad",
		"Gobn>BatchNormWithGlobalNormalizationGrad": "gobn_batch_norm_with_global_normalization_grad",
		"Gobn>BatchNormGradReduce":                  "gobn_batch_norm_grad_reduce",
		"Conv2D":                                    "conv2d",
		"DepthwiseConv2dNative":                     "depthwise_conv2d_native",
		"Conv3DBackpropInputV2":                     "conv3d_backprop_input_v2",
		"AbcV3D":                                    "abc_v3d",
		"Gobn>X2Y":                                  "gobn_x2y",
		"AB":                                        "ab",
	} {
		require.Equal(t, want, WrapperName(op), op)
	}
}

// TestRecordOfANewKind: an op with an int attr, a list output and a stock
// twin internal to TensorFlow is recorded with them, the list with its
// number attr and the int attr among its XLA call's.
func TestRecordOfANewKind(t *testing.T) {
	src := string(Generate([]opdef.Op{recipe.Throwaway}))
	for _, want := range []string{
		`stock="_Throwaway", gradient_of=None, kind="Throwaway"`,
		`lists=(("side_backprop", "num_sides"),)`,
		`xla_outputs=(("x_backprop", "x"), ("side_backprop", "x"))`,
		`xla_attrs=(("num_sides", "int"), ("mode", "string"), ("data_format", "string"))`,
	} {
		require.Contains(t, src, want)
	}
}
