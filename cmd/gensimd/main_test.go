package main

import (
	"os"
	"testing"

	"github.com/gobn/gobn/internal/genfile"
)

// TestGeneratedFileIsCurrent fails when simd_amd64.go changed without
// `go generate ./kernels`.
func TestGeneratedFileIsCurrent(t *testing.T) {
	src, err := os.ReadFile("../../kernels/simd_amd64.go")
	if err == nil {
		src, err = Generate(src)
	}
	if err == nil {
		err = genfile.Current("../../kernels/simd512_gen_amd64.go", src, "go generate ./kernels")
	}
	if err != nil {
		t.Fatal(err)
	}
}
