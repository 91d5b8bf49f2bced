package opdef_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/opdef"
)

// TestXLAArgs checks what an op's XLA custom call takes and returns against
// testdata/ops.json: every input and output but those in host memory and the
// placeholders, in order, each result shaped like an input the call takes.
func TestXLAArgs(t *testing.T) {
	for i, w := range opTable(t) {
		op := opdef.All[i]
		require.Equal(t, w.XLAInputs, op.XLAInputs(), op.Name)
		require.Equal(t, w.XLAOutputs, op.XLAOutputs(), op.Name)
		for _, i := range op.XLAOutputs() {
			require.Contains(t, op.XLAInputs(), op.Outputs[i].Shape.Like, "%s: %s", op.Name, op.Outputs[i].Name)
		}
		for i, a := range op.Inputs {
			require.Equal(t, !slices.Contains(op.XLAInputs(), i), op.InHostMemory(a.Name), "%s: %s", op.Name, a.Name)
		}
	}
}
