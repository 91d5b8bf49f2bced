package main

import (
	"testing"

	"github.com/gobn/gobn/internal/genfile"
	"github.com/gobn/gobn/opdef"
	"github.com/stretchr/testify/require"
)

// TestGeneratedFileIsCurrent fails when opdef changed without `go generate ./capi`.
func TestGeneratedFileIsCurrent(t *testing.T) {
	require.NoError(t, genfile.Current("../../capi/registry_gen.c", Generate(opdef.All), "go generate ./capi"))
}
