package cuda

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBarrierKey checks which stream's grid-barrier word a persistent launch
// uses, and which streams fall back to the three launches.
func TestBarrierKey(t *testing.T) {
	broken := errors.New("the driver failed")
	for _, tc := range []struct {
		name    string
		stream  Stream
		state   streamState
		err     error
		want    streamKey
		refused bool  // falls back (errNoCooperative)
		fails   error // fails the call with this error
		asked   bool  // the driver was asked of the stream
	}{
		{name: "gobn's own", stream: 0, want: streamKey{own: true}},
		{name: "a caller's by ID", stream: 0x7f00, state: streamState{id: 41, known: true}, want: streamKey{id: 41}, asked: true},
		{name: "the legacy stream by its ID", stream: 0x1, state: streamState{id: 1, known: true}, want: streamKey{id: 1}, asked: true},
		{name: "per thread", stream: streamPerThread, refused: true},
		{name: "being captured", stream: 0x7f00, state: streamState{id: 41, known: true, capturing: true}, refused: true, asked: true},
		{name: "no cuStreamGetId", stream: 0x7f00, refused: true, asked: true},
		{name: "the driver fails", stream: 0x7f00, err: broken, fails: broken, asked: true},
	} {
		asked := false
		got, err := barrierKey(tc.stream, func() (streamState, error) { asked = true; return tc.state, tc.err })
		require.Equal(t, tc.asked, asked, tc.name)
		switch {
		case tc.refused:
			require.ErrorIs(t, err, errNoCooperative, tc.name)
		case tc.fails != nil:
			require.ErrorIs(t, err, tc.fails, tc.name)
			require.NotErrorIs(t, err, errNoCooperative, "%s: a broken driver is an error, not a fallback", tc.name)
		default:
			require.NoError(t, err, tc.name)
			require.Equal(t, tc.want, got, tc.name)
		}
	}
	// Two streams never share a word; gobn's own never shares one with a caller's.
	a, _ := barrierKey(0x7f00, func() (streamState, error) { return streamState{id: 1, known: true}, nil })
	b, _ := barrierKey(0x7f00, func() (streamState, error) { return streamState{id: 2, known: true}, nil })
	own, _ := barrierKey(0, nil)
	zero, _ := barrierKey(0x7f00, func() (streamState, error) { return streamState{id: 0, known: true}, nil })
	require.NotEqual(t, a, b, "one handle reused by a new stream")
	require.NotEqual(t, own, zero)
}
