package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/internal/cudaspec"
	"github.com/gobn/gobn/internal/genfile"
	"github.com/gobn/gobn/internal/recipe"
	"github.com/gobn/gobn/opdef"
)

// TestGeneratedFilesAreCurrent fails when internal/cudaspec, the table of
// kernels, opdef or a kind's kernels changed without `go generate
// ./kernels/cuda`.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	files, err := Generate("../..")
	require.NoError(t, err)
	require.Len(t, files, 4)
	for name, b := range files {
		require.NoError(t, genfile.Current(filepath.Join("../../kernels/cuda", name), b, "go generate ./kernels/cuda"))
	}
}

func TestSnake(t *testing.T) {
	for in, want := range map[string]string{"Dy": "dy", "DX": "dx", "X": "x", "SumDyXmu": "sum_dy_xmu",
		"Flags": "flags", "Var": "var", "N": "n"} {
		require.Equal(t, want, snake(in), in)
	}
}

// TestKernelsHeaderRefuses: a job's kernels that name their outputs (or
// their own tensors) differently, more than gobn_params has slots, or a
// call with a placeholder the kernel has no value for.
func TestKernelsHeaderRefuses(t *testing.T) {
	a := cudaspec.FinalizeKernel("finalize_x", "finalize_x<{T}>(p)", []string{"da", "db"}, cudaspec.Float32, cudaspec.Float16)
	_, err := kernelsHeader(a)
	require.NoError(t, err)
	a[1].Outputs = []string{"db", "da"}
	_, err = kernelsHeader(a)
	require.ErrorContains(t, err, "the kernels of job finalize_x name their outputs differently")
	_, err = kernelsHeader(cudaspec.FinalizeKernel("finalize_y", "finalize_y(p)", []string{"a", "b", "c", "d", "e", "f"}))
	require.ErrorContains(t, err, "6 outputs, gobn_params has 5 slots")
	_, err = kernelsHeader(cudaspec.FinalizeKernel("finalize_z", "finalize_z<{T}, {W}>(p)", nil, cudaspec.Float32))
	require.ErrorContains(t, err, "has a placeholder the kernel has no value for")

	own := cudaspec.WithTensors(cudaspec.LayoutKernels("apply_ex", "apply_ex_{L}<{T}, {V}, {U}>(p)", cudaspec.Layouts,
		cudaspec.Float32), "y", "side_input_backprop")
	h, err := kernelsHeader(own)
	require.NoError(t, err)
	require.Contains(t, string(h), "namespace tensor {\nnamespace apply_ex {\nenum { y, side_input_backprop };\n}\n}")
	own[1].Tensors = []string{"y"}
	_, err = kernelsHeader(own)
	require.ErrorContains(t, err, "the kernels of job apply_ex name their tensors differently")
	_, err = kernelsHeader(cudaspec.WithTensors(own[:1], "a", "b", "c", "d", "e"))
	require.ErrorContains(t, err, "5 tensors, gobn_params has 4 slots")
}

// TestCheckOfANewKind: the GPU check's calls of a kind, and the golden
// test's, come from opdef and its kernels alone: its tensors, its list
// output with its number attr, its attrs in the fields of their names; a
// kind without kernels is named by its file.
func TestCheckOfANewKind(t *testing.T) {
	_, err := GenerateCheck([]opdef.Op{recipe.Throwaway}, "../..")
	require.ErrorContains(t, err, "kernels/throwaway.go: no func Throwaway[T Element](a <its args>)")
	root := t.TempDir()
	require.NoError(t, recipe.WriteThrowawayKernels(root, recipe.ThrowawayCPUFields, recipe.ThrowawayGPUFields))
	src, err := GenerateCheck([]opdef.Op{recipe.Throwaway}, root)
	require.NoError(t, err)
	for _, want := range []string{
		`{name: "side_backprop", output: true, activation: true, ofT: true, list: "num_sides"}`,
		`{name: "scale"}`,
		`NumSides: c.attrs["num_sides"].(int64),`,
		`SideBackprop: tensorOf[T](m, c, "side_backprop")})`,
		`SideBackprop: c.ptr("side_backprop")}, cuda.Throwaway)`,
	} {
		require.Contains(t, string(src), want)
	}
	table, err := GenerateKernelTable([]opdef.Op{recipe.Throwaway})
	require.NoError(t, err)
	require.Contains(t, string(table), `"Throwaway": {"float": kernels.Throwaway[float32], "double": kernels.Throwaway[float64]`)
}
