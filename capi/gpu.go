package main

import (
	"github.com/gobn/gobn/kernels/cuda"
)

// What every family's GPU kernel shares: TensorFlow hands a GPU kernel
// device memory (but for opdef.Op.HostMemory); the kernels of package
// kernels/cuda run on TensorFlow's stream for the op where it can be found
// (stream.go), or on XLA's for an XLA call (xla.go).

// ptr returns t's device address, or 0 for a tensor with no elements:
// TensorFlow gives an empty tensor on a GPU an address that is no device
// memory, so it must not tell the call's device (cuda's anchor skips 0).
func ptr(t tensor) cuda.Ptr {
	if t.bytes == 0 {
		return 0
	}
	return cuda.Ptr(uintptr(t.data))
}

// launch allocates the workspace the call needs and runs it on the call's
// stream (streamRule).
func launch[A interface{ WorkspaceBytes() int64 }](a A, run func(A, cuda.Placement) error, g gpuCall) error {
	var pl cuda.Placement
	if bytes := a.WorkspaceBytes(); bytes > 0 {
		ws, err := g.temp(bytes)
		if err != nil {
			return err
		}
		pl.Workspace, pl.WorkspaceBytes = cuda.Ptr(ws), bytes
	}
	return tfStream.run(g.stream, func(s cuda.Stream) error {
		pl.Stream, pl.CheckStream = s, s != 0
		return run(a, pl)
	})
}

// gpuCall is what a GPU kernel needs of its call beyond the tensors:
// scratch memory on the device, held until the call ends, and the stream
// the call runs on: TensorFlow's for the op (call.go), or XLA's (xla.go). A
// CPU kernel needs neither (nil).
type gpuCall interface {
	temp(bytes int64) (uintptr, error)
	stream() (cuda.Stream, error)
}
