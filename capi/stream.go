package main

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/gobn/gobn/kernels/cuda"
)

// A GPU call enqueues its kernels on TensorFlow's compute stream for the op
// and returns, as TensorFlow's own GPU kernels do: TensorFlow's allocator
// orders the call's outputs and workspace on that stream, and the ops after
// it run on it. The C API names no such stream; stream.c finds it through
// the framework library, and kernels/cuda checks it before the first use
// (Placement.CheckStream). Where either fails (a TensorFlow release without
// the function, a stream of another context, flags no stream has), the call
// runs by the synchronizing rule instead (Placement.Stream zero: synchronize
// the device's primary context, run on gobn's own stream, wait), counted,
// and said once on standard error.

// streamRule decides a GPU call's stream and counts what it decided.
type streamRule struct {
	on        atomic.Bool            // use TensorFlow's stream (SetTFStream)
	resolved  atomic.Bool            // a call has run on TensorFlow's stream
	onStream  atomic.Uint64          // calls run on TensorFlow's stream
	fallbacks atomic.Uint64          // calls that looked for it and fell back
	first     atomic.Pointer[string] // why the first fallback fell back
	reported  sync.Once
	report    func(msg string) // where the once-message goes
}

var tfStream = newStreamRule(func(msg string) { fmt.Fprintln(os.Stderr, msg) })

func newStreamRule(report func(string)) *streamRule {
	r := &streamRule{report: report}
	r.on.Store(true)
	return r
}

// errNoStream: TensorFlow gave no stream for the call (stream.c's codes).
var errNoStream = errors.New("gobn: no TensorFlow stream for the call")

// run runs launch on the stream resolve gives, where it checks out, and
// otherwise by the synchronizing rule (launch(0)). launch must run nothing
// when it refuses a stream (its error then wraps cuda.ErrStreamRefused).
func (r *streamRule) run(resolve func() (cuda.Stream, error), launch func(cuda.Stream) error) error {
	if !r.on.Load() {
		return launch(0)
	}
	s, err := resolve()
	if err == nil {
		err = launch(s)
		if !errors.Is(err, cuda.ErrStreamRefused) {
			r.onStream.Add(1)
			r.resolved.Store(true)
			return err
		}
	}
	r.fallbacks.Add(1)
	r.reported.Do(func() {
		why := err.Error()
		r.first.Store(&why)
		r.report("gobn: GPU calls synchronize the device instead of running on TensorFlow's stream: " + why)
	})
	return launch(0)
}

// stats returns what the rule decided since the library was loaded.
func (r *streamRule) stats() map[string]any {
	why := ""
	if p := r.first.Load(); p != nil {
		why = *p
	}
	synchronizing, enqueuing := cuda.Synchronized()
	return map[string]any{
		"enabled": r.on.Load(), "resolved": r.resolved.Load(),
		"on_stream": r.onStream.Load(), "fallbacks": r.fallbacks.Load(), "first_fallback": why,
		"synchronized_calls": synchronizing, "enqueued_calls": enqueuing,
	}
}
