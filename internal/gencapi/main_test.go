package main

import (
	"os"
	"testing"

	"github.com/gobn/gobn/opdef"
	"github.com/stretchr/testify/require"
)

// TestGeneratedFileIsCurrent fails when opdef changed without `go generate ./capi`.
func TestGeneratedFileIsCurrent(t *testing.T) {
	onDisk, err := os.ReadFile("../../capi/registry_gen.c")
	require.NoError(t, err)
	require.Equal(t, string(Generate(opdef.All)), string(onDisk),
		"capi/registry_gen.c is stale: run `go generate ./capi`")
}
