package cuda

import "github.com/gobn/gobn/internal/cudaspec"

// DType is the element type T of an activation tensor on the device.
type DType int

const (
	Float32 DType = iota
	Float16
	BFloat16
)

// Size returns the bytes of one element.
func (t DType) Size() int64 { return int64(t.elem().Size) }

// elem returns t as the kernels' table (cudaspec) names it.
func (t DType) elem() cudaspec.Elem {
	switch t {
	case Float16:
		return cudaspec.Float16
	case BFloat16:
		return cudaspec.BFloat16
	}
	return cudaspec.Float32
}

func (t DType) String() string {
	switch t {
	case Float32:
		return "float"
	case Float16:
		return "half"
	case BFloat16:
		return "bfloat16"
	}
	return "unknown"
}

// Ptr is a device address (a CUdeviceptr). Zero is allowed only for a tensor
// of no elements.
type Ptr = cudaspec.Ptr

// Stream is a CUstream.
type Stream uintptr

// Placement says how a call runs.
//
// With Stream zero (TensorFlow's rule) the call synchronizes the primary
// context of the device that holds the tensors, so that its inputs are
// complete, launches on gobn's own stream for that device, and waits for it
// before returning. With a Stream, the call only enqueues its kernels on that
// stream, as a CUDA library does; the caller orders and waits.
//
// CheckStream has the call check Stream before it enqueues anything on it,
// once per stream (the stream is remembered): the stream must belong to the
// primary context of the device that holds the tensors, and have the flags
// a stream is created with (streamVerdict). A stream that fails is refused
// with an error that wraps ErrStreamRefused, and nothing has run. It is for
// a stream gobn was not handed by an API that promises one: TensorFlow's,
// found through its framework library (capi).
//
// Workspace is device memory of at least the args' WorkspaceBytes, on the
// same device, not touched by anything else until the call's kernels finish.
type Placement struct {
	Stream         Stream
	CheckStream    bool
	Workspace      Ptr
	WorkspaceBytes int64
}
