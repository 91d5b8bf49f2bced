package cuda

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// ErrStreamRefused: a Placement with CheckStream named a stream that failed
// the check (streamVerdict). Nothing of the call has run; the caller may run
// it again by the synchronizing rule (Stream zero).
var ErrStreamRefused = errors.New("gobn: the stream cannot be used")

// The creation flags a stream may have (cuda.h): CU_STREAM_DEFAULT and
// CU_STREAM_NON_BLOCKING, with which TensorFlow 2.21 creates its streams.
const (
	streamDefault     = 0x0
	streamNonBlocking = 0x1
)

// errOtherContext is gobn_cuda_stream_check's answer for a stream of a
// context other than the device's primary one.
const errOtherContext = -2

// streamVerdict says whether a stream a Placement asks to be checked may be
// used on device ordinal, from gobn_cuda_stream_check's result r and the
// stream's creation flags: it must belong to the device's primary context,
// where TensorFlow runs and gobn's module lives (a stream of another device
// or context would run gobn's kernels where they are not loaded, or outside
// TensorFlow's ordering), and have flags a stream is created with. describe
// names a CUDA error code.
func streamVerdict(ordinal, r int, flags uint, describe func(int) error) error {
	switch {
	case r == errOtherContext:
		return fmt.Errorf("%w: it belongs to a context other than device %d's primary one", ErrStreamRefused, ordinal)
	case r != 0:
		return fmt.Errorf("%w: querying it on device %d: %w", ErrStreamRefused, ordinal, describe(r))
	case flags != streamDefault && flags != streamNonBlocking:
		return fmt.Errorf("%w: its flags %#x are not a stream's", ErrStreamRefused, flags)
	}
	return nil
}

// synchronized counts the calls that ran by the synchronizing rule (a
// Placement with Stream zero, and launches to make), and enqueued those that
// only enqueued their launches on a caller's stream.
var synchronized, enqueued atomic.Uint64

// Synchronized returns how many calls since the process started
// synchronized the device (Placement.Stream zero), and how many only
// enqueued on a caller's stream: how the tests tell that TensorFlow's path
// did not synchronize.
func Synchronized() (synchronizing, enqueuing uint64) {
	return synchronized.Load(), enqueued.Load()
}
