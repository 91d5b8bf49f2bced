package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/internal/genfile"
)

// TestGeneratedFilesAreCurrent fails when internal/cudaspec changed without
// `go generate ./kernels/cuda`.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	files, err := Generate()
	require.NoError(t, err)
	require.Len(t, files, 2)
	for name, b := range files {
		require.NoError(t, genfile.Current(filepath.Join("../../kernels/cuda", name), b, "go generate ./kernels/cuda"))
	}
}

func TestSnake(t *testing.T) {
	for in, want := range map[string]string{"Dy": "dy", "DX": "dx", "X": "x", "SumDyXmu": "sum_dy_xmu",
		"ScaleAfterNormalization": "scale_after_normalization", "Var": "var", "N": "n"} {
		require.Equal(t, want, snake(in), in)
	}
}
