package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gobn/gobn/kernels/cuda"
	"github.com/stretchr/testify/require"
)

// TestStreamRule runs the rule that picks a GPU call's stream with a fake
// resolver and a fake launch: TensorFlow's stream where it resolves and the
// launch accepts it; otherwise the synchronizing rule (stream 0), counted
// per call and reported once; a launch's own failure is the call's error,
// not a fallback.
func TestStreamRule(t *testing.T) {
	const tfs = cuda.Stream(0x7f00)
	refused := fmt.Errorf("%w: its flags 0x4 are not a stream's", cuda.ErrStreamRefused)
	failed := errors.New("launching gobn_reduce_cl_f32_v4: CUDA_ERROR_LAUNCH_FAILED")
	cases := []struct {
		name      string
		off       bool
		resolved  error   // resolve's error (its stream is tfs)
		answers   []error // launch's answers, one per launch, in order
		want      error
		launched  []cuda.Stream
		fallbacks uint64
	}{
		{name: "TensorFlow's stream", answers: []error{nil}, launched: []cuda.Stream{tfs}},
		{name: "no symbol", resolved: errNoStream, answers: []error{nil},
			launched: []cuda.Stream{0}, fallbacks: 1},
		{name: "stream refused", answers: []error{refused, nil},
			launched: []cuda.Stream{tfs, 0}, fallbacks: 1},
		{name: "refused, then the rule fails too", answers: []error{refused, failed}, want: failed,
			launched: []cuda.Stream{tfs, 0}, fallbacks: 1},
		{name: "launch fails on the stream", answers: []error{failed}, want: failed,
			launched: []cuda.Stream{tfs}},
		{name: "switched off", off: true, answers: []error{nil}, launched: []cuda.Stream{0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var reports []string
			r := newStreamRule(func(msg string) { reports = append(reports, msg) })
			r.on.Store(!c.off)
			resolves := 0
			resolve := func() (cuda.Stream, error) {
				resolves++
				if c.resolved != nil {
					return 0, c.resolved
				}
				return tfs, nil
			}
			for call := range 3 {
				var launched []cuda.Stream
				err := r.run(resolve, func(s cuda.Stream) error {
					launched = append(launched, s)
					return c.answers[len(launched)-1]
				})
				require.ErrorIs(t, err, c.want)
				if c.want == nil {
					require.NoError(t, err)
				}
				require.Equal(t, c.launched, launched, "call %d", call)
			}
			stats := r.stats()
			require.Equal(t, 3*c.fallbacks, stats["fallbacks"])
			if c.off {
				require.Zero(t, resolves, "a rule switched off asks for no stream")
				require.Equal(t, uint64(0), stats["on_stream"])
				require.Equal(t, false, stats["resolved"])
			}
			if !c.off {
				onStream := uint64(3)
				if c.fallbacks > 0 {
					onStream = 0
				}
				require.Equal(t, onStream, stats["on_stream"])
				require.Equal(t, onStream > 0, stats["resolved"])
			}
			if c.fallbacks == 0 {
				require.Empty(t, reports)
				require.Equal(t, "", stats["first_fallback"])
				return
			}
			require.Len(t, reports, 1, "said once")
			why := stats["first_fallback"].(string)
			require.NotEmpty(t, why)
			require.Contains(t, reports[0], why)
			require.Contains(t, reports[0], "synchronize the device")
		})
	}
}
