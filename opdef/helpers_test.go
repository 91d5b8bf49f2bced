package opdef_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/opdef"
)

// byName returns the op registered as name, and whether there is one.
func byName(name string) (opdef.Op, bool) {
	for _, op := range opdef.All {
		if op.Name == name {
			return op, true
		}
	}
	return opdef.Op{}, false
}

// typeAttrs returns the names of op's type attrs bound by its kernels, in a
// fixed order ("T", then "U").
func typeAttrs(op opdef.Op) []string {
	var names []string
	for _, name := range []string{"T", "U"} {
		if _, ok := op.Kernels[0][name]; ok {
			names = append(names, name)
		}
	}
	return names
}

// opRow is one op of testdata/ops.json, the hand-written table of what the
// tests expect of every op (its "about" says what each field is). It is
// kept apart from opdef so that a wrong fact in opdef fails against it.
type opRow struct {
	Name        string              `json:"name"`
	Stock       string              `json:"stock"`
	GradientOf  string              `json:"gradient_of"`
	Kind        string              `json:"kind"`
	Activation  string              `json:"activation"`
	Inputs      []string            `json:"inputs"`
	Outputs     []string            `json:"outputs"`
	Attrs       []string            `json:"attrs"`
	CPUKernels  [][]string          `json:"cpu_kernels"`
	GPUKernels  [][]string          `json:"gpu_kernels"`
	HostMemory  []string            `json:"host_memory"`
	XLAInputs   []int               `json:"xla_inputs"`
	XLAOutputs  []int               `json:"xla_outputs"`
	Modes       []string            `json:"modes"`
	StockKernel map[string][]string `json:"stock_kernels"`
}

// opTable reads testdata/ops.json and requires that it names the ops of
// opdef.All, in the same order: an op added to opdef fails every test that
// iterates the table until its row is written.
func opTable(t *testing.T) []opRow {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "ops.json"))
	require.NoError(t, err)
	var table struct {
		About []string `json:"about"`
		Ops   []opRow  `json:"ops"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&table))
	// Every field in every row: a row written without one fails.
	var rows struct {
		Ops []map[string]json.RawMessage `json:"ops"`
	}
	require.NoError(t, json.Unmarshal(data, &rows))
	fields := reflect.TypeFor[opRow]().NumField()
	for i, r := range rows.Ops {
		require.Len(t, r, fields, "row %d of testdata/ops.json: a field missing", i)
	}
	var names, want []string
	for _, r := range table.Ops {
		names = append(names, r.Name)
	}
	for _, op := range opdef.All {
		want = append(want, op.Name)
	}
	require.Equal(t, want, names, "testdata/ops.json must list opdef.All's ops, in order")
	return table.Ops
}

// bindings renders op's kernels' type bindings as the table writes them: T,
// then U where the op has it.
func bindings(kernels []opdef.TypeBinding) [][]string {
	var out [][]string
	for _, k := range kernels {
		b := []string{k["T"].String()}
		if u, ok := k["U"]; ok {
			b = append(b, u.String())
		}
		out = append(out, b)
	}
	return out
}
