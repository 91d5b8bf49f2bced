package fuzzbytes

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBytesThenZeros(t *testing.T) {
	r := New([]byte{7, 9})
	require.Equal(t, []byte{7, 9, 0, 0}, []byte{r.Byte(), r.Byte(), r.Byte(), r.Byte()})
}

func TestBytesThenRest(t *testing.T) {
	r := New([]byte{7})
	next := byte(40)
	r.Rest = func() byte { next++; return next }
	require.Equal(t, []byte{7, 41, 42}, []byte{r.Byte(), r.Byte(), r.Byte()})
}
