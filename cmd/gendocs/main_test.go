package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/internal/genfile"
	"github.com/gobn/gobn/opdef"
)

// TestGeneratedTableIsCurrent fails when opdef changed without `make generate`.
func TestGeneratedTableIsCurrent(t *testing.T) {
	doc, err := os.ReadFile("../../docs/design.md")
	require.NoError(t, err)
	want, err := Generate(doc, opdef.All)
	require.NoError(t, err)
	require.NoError(t, genfile.Current("../../docs/design.md", want, "make generate"))
	_, err = Generate([]byte("no markers"), opdef.All)
	require.ErrorContains(t, err, "no")
}
