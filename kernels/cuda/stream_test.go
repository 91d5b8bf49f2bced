package cuda

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStreamVerdict checks which streams a Placement with CheckStream
// accepts: one of the device's primary context created with the default or
// non-blocking flags; anything else is refused with ErrStreamRefused, which
// names why.
func TestStreamVerdict(t *testing.T) {
	describe := func(r int) error { return fmt.Errorf("CUDA error %d", r) }
	for _, tc := range []struct {
		name  string
		r     int
		flags uint
		why   string // "" for a stream that is accepted
	}{
		{name: "TensorFlow 2.21's stream", flags: streamNonBlocking},
		{name: "a blocking stream", flags: streamDefault},
		{name: "another context", r: errOtherContext, flags: streamNonBlocking, why: "context other than device 3's primary one"},
		{name: "the query fails", r: 400, why: "CUDA error 400"},
		{name: "flags no stream has", flags: 0x6, why: "flags 0x6"},
	} {
		err := streamVerdict(3, tc.r, tc.flags, describe)
		if tc.why == "" {
			require.NoError(t, err, tc.name)
			continue
		}
		require.True(t, errors.Is(err, ErrStreamRefused), tc.name)
		require.ErrorContains(t, err, tc.why, tc.name)
	}
}
