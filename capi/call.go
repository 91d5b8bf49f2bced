package main

// #include <stdlib.h>
// #include "gobn.h"
import "C"

import (
	"fmt"
	"math/bits"
	"runtime"
	"sync"
	"unsafe"

	"github.com/gobn/gobn/kernels/cuda"
	"github.com/gobn/gobn/opdef"
)

// call is one run of a kernel's compute: it owns every TF_Tensor it hands out
// and frees them all in release. Calls are pooled, and their arrays back the
// descriptions and dims of a call's tensors, so that a call allocates
// nothing. The arrays C reads or writes are allocations of their own: held
// and descs, whose types hold pointers, in C's memory, where cgo's pointer
// checks stop at once (in Go's they would scan the whole array on every
// call, more time than a small kernel's arithmetic); dimsBuf, free of
// pointers, in Go's.
type call struct {
	ctx     *C.TF_OpKernelContext
	status  *C.TF_Status
	tensors []*C.TF_Tensor
	held    *[16]*C.TF_Tensor  // tensors' first backing array (C memory)
	descs   *[10]C.gobn_tensor // what C fills in (C memory)
	in      [10]tensor         // inputs' first backing array
	dims    []int64            // what hold has not used of dimsBuf
	dimsBuf *[96]int64
}

var callPool = sync.Pool{New: func() any {
	held := C.malloc(C.size_t(unsafe.Sizeof([16]*C.TF_Tensor{}))) // cgo's malloc never returns nil
	descs := C.malloc(C.size_t(unsafe.Sizeof([10]C.gobn_tensor{})))
	c := &call{held: (*[16]*C.TF_Tensor)(held), descs: (*[10]C.gobn_tensor)(descs), dimsBuf: new([96]int64)}
	clear(c.held[:])
	clear(c.descs[:])
	// The pool drops calls when Go collects; their C arrays go with them.
	runtime.AddCleanup(c, func(p [2]unsafe.Pointer) { C.free(p[0]); C.free(p[1]) }, [2]unsafe.Pointer{held, descs})
	return c
}}

func newCall(ctx *C.TF_OpKernelContext) *call {
	c := callPool.Get().(*call)
	c.ctx, c.status = ctx, C.TF_NewStatus()
	c.tensors, c.dims = c.held[:0], c.dimsBuf[:]
	return c
}

// release frees the call's tensors and status, and returns the call to the
// pool: nothing the call handed out may be used after it.
func (c *call) release() {
	if len(c.tensors) > 0 {
		C.gobn_delete_tensors(&c.tensors[0], C.int(len(c.tensors)))
	}
	C.TF_DeleteStatus(c.status)
	clear(c.held[:])
	clear(c.in[:])
	c.ctx, c.status, c.tensors, c.dims = nil, nil, nil, nil
	callPool.Put(c)
}

// hold takes ownership of the tensor d describes.
func (c *call) hold(d *C.gobn_tensor) tensor {
	c.tensors = append(c.tensors, d.tensor)
	n := int(d.ndims)
	var dims []int64
	if n <= len(c.dims) {
		dims, c.dims = c.dims[:n:n], c.dims[n:]
	} else {
		dims = make([]int64, n)
	}
	for i := range dims {
		if i < C.GOBN_INLINE_DIMS {
			dims[i] = int64(d.dims[i])
		} else {
			dims[i] = int64(C.TF_Dim(d.tensor, C.int(i)))
		}
	}
	return tensor{dtype: opdef.DType(d.dtype), dims: dims, data: d.data, bytes: int(d.bytes)}
}

// inputs fetches the first want inputs of the call, and returns them with
// the number of inputs the call has.
func (c *call) inputs(want int) (in []tensor, total int, err error) {
	ds := c.descs[:]
	if want > len(ds) {
		ds = make([]C.gobn_tensor, want)
	}
	var n, fetched C.int
	code := C.gobn_inputs(c.ctx, &ds[0], C.int(want), &n, &fetched, c.status)
	in = c.in[:0]
	for i := range int(fetched) {
		in = append(in, c.hold(&ds[i]))
	}
	if code != C.TF_OK {
		return nil, 0, statusError(c.status)
	}
	return in, int(n), nil
}

// allocate allocates output i with the given dtype and dims, or hands it the
// buffer of one of the inputs in reuse (see inputSet) when TensorFlow finds
// that nothing else references it.
func (c *call) allocate(i int, dtype opdef.DType, dims []int64, reuse inputSet) (tensor, error) {
	var dimsPtr *C.int64_t
	if len(dims) > 0 {
		dimsPtr = (*C.int64_t)(unsafe.Pointer(&dims[0]))
	}
	d := &c.descs[0] // free again: the inputs' descriptions are copied out
	var code C.TF_Code
	if reuse != 0 {
		if bits.Len32(uint32(reuse)) > len(c.tensors) {
			return tensor{}, internalError(fmt.Sprintf("gobn: output %d offered inputs %b of %d", i, reuse, len(c.tensors)))
		}
		code = C.gobn_forward_or_allocate(c.ctx, C.int(i), &c.tensors[0], C.unsigned(reuse), dimsPtr, C.int(len(dims)), d, c.status)
	} else {
		n := int64(1)
		for _, d := range dims {
			n *= d
		}
		code = C.gobn_allocate(c.ctx, C.int(i), C.TF_DataType(dtype), dimsPtr, C.int(len(dims)),
			C.size_t(n*int64(dtype.Size())), d, c.status)
	}
	if code != C.TF_OK {
		return tensor{}, statusError(c.status)
	}
	return c.hold(d), nil // view checks its byte size against its dims
}

// temp allocates bytes of scratch memory on the kernel's device, held by
// the call until release, and returns its address.
func (c *call) temp(bytes int64) (uintptr, error) {
	d := &c.descs[0]
	if C.gobn_allocate_temp(c.ctx, C.int64_t(bytes), d, c.status) != C.TF_OK {
		return 0, statusError(c.status)
	}
	return uintptr(c.hold(d).data), nil
}

// stream returns TensorFlow's compute stream for the call's op (stream.c):
// GPU kernels only.
func (c *call) stream() (cuda.Stream, error) {
	var s C.uintptr_t
	switch code := C.gobn_tf_stream(c.ctx, &s); code {
	case C.GOBN_STREAM_OK:
		return cuda.Stream(s), nil
	case C.GOBN_STREAM_NO_SYMBOL:
		return 0, fmt.Errorf("%w: this TensorFlow's framework library does not export OpKernelContext::eigen_device<Eigen::GpuDevice>", errNoStream)
	case C.GOBN_STREAM_NO_DEVICE:
		return 0, fmt.Errorf("%w: the op's context has no GPU device", errNoStream)
	default:
		return 0, fmt.Errorf("%w: the op's GPU device has no stream (code %d)", errNoStream, int(code))
	}
}
