package cuda

import "fmt"

// barrierWords is the persistent kernel's grid-barrier word count (uint32,
// grid_barrier in batchnorm.cu).
const barrierWords = 1

// streamPerThread is CU_STREAM_PER_THREAD (cuda.h): one handle for a
// different stream in each thread.
const streamPerThread Stream = 0x2

// streamKey tells a stream: gobn's own, or a caller's by its unique ID.
type streamKey struct {
	own bool
	id  uint64
}

// streamState is what the driver says of a caller's stream: its unique ID
// (known: false where the driver has no cuStreamGetId, before CUDA 12.0),
// and whether it is being captured into a graph.
type streamState struct {
	id        uint64
	known     bool
	capturing bool
}

// barrierKey says whose grid-barrier word a persistent launch on stream
// (0: gobn's own) uses. The kernel needs no zeroing before a launch because
// every barrier leaves the word's count as it found it and launches on one
// stream never run at once (grid_barrier in batchnorm.cu); so a word must
// belong to one stream. Streams are told by their unique IDs, not their
// handles, which a new stream may reuse while a destroyed one's work still
// runs. query asks the driver of a caller's stream. Where a stream cannot
// have a word of its own the error wraps errNoCooperative: the call runs
// the three launches, counted.
func barrierKey(stream Stream, query func() (streamState, error)) (streamKey, error) {
	refuse := func(why string) error { return fmt.Errorf("%w: %s", errNoCooperative, why) }
	switch stream {
	case 0:
		return streamKey{own: true}, nil // never captured or destroyed
	case streamPerThread:
		return streamKey{}, refuse("CU_STREAM_PER_THREAD names a different stream in each thread")
	}
	s, err := query()
	switch {
	case err != nil:
		return streamKey{}, err
	case !s.known:
		return streamKey{}, refuse("the driver has no cuStreamGetId (CUDA 12.0) to tell streams apart")
	case s.capturing: // the graph may run anywhere, any number of times at once
		return streamKey{}, refuse("the stream is being captured into a graph")
	}
	return streamKey{id: s.id}, nil
}
