package opdef_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/opdef"
)

// TestXLAArgs checks what an op's XLA custom call takes and returns: every
// input and output but those in host memory and the placeholders, in order,
// each result shaped like an input the call takes.
func TestXLAArgs(t *testing.T) {
	want := map[string]struct{ in, out []int }{
		"Gobn>FusedBatchNormGrad":                   {[]int{0, 1, 2, 3, 4}, []int{0, 1, 2}},
		"Gobn>FusedBatchNormGradV2":                 {[]int{0, 1, 2, 3, 4}, []int{0, 1, 2}},
		"Gobn>FusedBatchNormGradV3":                 {[]int{0, 1, 2, 3, 4, 5}, []int{0, 1, 2}},
		"Gobn>BatchNormWithGlobalNormalizationGrad": {[]int{0, 1, 2, 3, 4}, []int{0, 1, 2, 3, 4}},
		"Gobn>BatchNormGradReduce":                  {[]int{0, 1, 2}, []int{0, 1}},
		"Gobn>BatchNormGradApply":                   {[]int{0, 1, 2, 3, 4, 5, 6}, []int{0}},
	}
	require.Len(t, opdef.All, len(want))
	for _, op := range opdef.All {
		w, ok := want[op.Name]
		require.True(t, ok, op.Name)
		require.Equal(t, w.in, op.XLAInputs(), op.Name)
		require.Equal(t, w.out, op.XLAOutputs(), op.Name)
		for _, i := range op.XLAOutputs() {
			require.Contains(t, op.XLAInputs(), op.Outputs[i].Shape.Like, "%s: %s", op.Name, op.Outputs[i].Name)
		}
		for i, a := range op.Inputs {
			require.Equal(t, !slices.Contains(op.XLAInputs(), i), op.InHostMemory(a.Name), "%s: %s", op.Name, a.Name)
		}
	}
}
