package main

import (
	"testing"

	"github.com/gobn/gobn/internal/genfile"
	"github.com/gobn/gobn/opdef"
	"github.com/stretchr/testify/require"
)

// TestGeneratedFileIsCurrent fails (for either file) when opdef changed without `go generate ./ops`.
func TestGeneratedFileIsCurrent(t *testing.T) {
	want, err := Generate(opdef.All)
	require.NoError(t, err)
	require.NoError(t, genfile.Current("../../ops/ops_gen.go", want, "go generate ./ops"))
	want, err = GenerateTable(opdef.All)
	require.NoError(t, err)
	require.NoError(t, genfile.Current("../../ops/wrappers_gen_test.go", want, "go generate ./ops"))
}

func TestOptionNamesFollowTheBindings(t *testing.T) {
	require.Equal(t, "DataFormat", camel("data_format"))
	require.Equal(t, "IsTraining", camel("is_training"))
	require.Equal(t, "Epsilon", camel("epsilon"))
}

func TestUnknownAttrTypeIsAnError(t *testing.T) {
	op := opdef.Op{Name: "Gobn>X", Stock: "X", Attrs: []opdef.Attr{{Name: "k", Kind: opdef.AttrKind(99)}}}
	_, err := Generate([]opdef.Op{op})
	require.ErrorContains(t, err, "attr k has kind 99")
}
