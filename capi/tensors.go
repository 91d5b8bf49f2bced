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

	"github.com/gobn/gobn/opdef"
)

// call is one run of a kernel's compute: it owns every TF_Tensor it hands out
// and frees them all in release. Calls are pooled, and their arrays back the
// descriptions and dims of a call's tensors, so that a call allocates
// nothing. The arrays C reads or writes are allocations of their own: held
// and descs, whose types hold pointers, in C's memory, where cgo's pointer
// checks stop at once (in Go's they scanned the whole array on every call,
// more time than a small kernel's arithmetic); dimsBuf, free of pointers, in
// Go's.
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

// constructionAttrs reads the attrs of a kernel being constructed.
type constructionAttrs struct {
	ctx    *C.TF_OpKernelConstruction
	status *C.TF_Status
}

func (a constructionAttrs) float(name string) (float32, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var v C.float
	C.TF_OpKernelConstruction_GetAttrFloat(a.ctx, cname, &v, a.status)
	return float32(v), statusError(a.status)
}

func (a constructionAttrs) bool(name string) (bool, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var v C.TF_Bool
	C.TF_OpKernelConstruction_GetAttrBool(a.ctx, cname, &v, a.status)
	return v != 0, statusError(a.status)
}

func (a constructionAttrs) dtype(name string) (opdef.DType, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var v C.TF_DataType
	C.TF_OpKernelConstruction_GetAttrType(a.ctx, cname, &v, a.status)
	return opdef.DType(v), statusError(a.status)
}

func (a constructionAttrs) string(name string) (string, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var listSize, totalSize C.int32_t
	C.TF_OpKernelConstruction_GetAttrSize(a.ctx, cname, &listSize, &totalSize, a.status)
	if err := statusError(a.status); err != nil {
		return "", err
	}
	buf := make([]byte, int(totalSize)+1)
	C.TF_OpKernelConstruction_GetAttrString(a.ctx, cname, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), a.status)
	if err := statusError(a.status); err != nil {
		return "", err
	}
	return string(buf[:totalSize]), nil
}

// shapeContext is the shape-inference context of one op being added to a graph.
type shapeContext struct {
	ctx    *C.TF_ShapeInferenceContext
	status *C.TF_Status
	// handles are freed by release.
	handles []*C.TF_ShapeHandle
}

func (s *shapeContext) release() {
	for _, h := range s.handles {
		C.TF_DeleteShapeHandle(h)
	}
}

func (s *shapeContext) own(h *C.TF_ShapeHandle) *C.TF_ShapeHandle {
	s.handles = append(s.handles, h)
	return h
}

// input returns the shape of input i, checked to have a rank in [minRank, maxRank]
// when its rank is known (maxRank < 0: no check).
func (s *shapeContext) input(i, minRank, maxRank int) (*C.TF_ShapeHandle, error) {
	h := s.own(C.TF_NewShapeHandle())
	C.TF_ShapeInferenceContextGetInput(s.ctx, C.int(i), h, s.status)
	if err := statusError(s.status); err != nil {
		return nil, err
	}
	if maxRank < 0 {
		return h, nil
	}
	checked := s.own(C.TF_NewShapeHandle())
	C.TF_ShapeInferenceContextWithRankAtLeast(s.ctx, h, C.int64_t(minRank), checked, s.status)
	if err := statusError(s.status); err != nil {
		return nil, err
	}
	C.TF_ShapeInferenceContextWithRankAtMost(s.ctx, checked, C.int64_t(maxRank), checked, s.status)
	return checked, statusError(s.status)
}

// dims returns the known dims of h (-1 for unknown ones), or nil when its rank
// is unknown.
func (s *shapeContext) dims(h *C.TF_ShapeHandle) []int64 {
	if C.TF_ShapeInferenceContextRankKnown(s.ctx, h) == 0 {
		return nil
	}
	dims := make([]int64, int(C.TF_ShapeInferenceContextRank(s.ctx, h)))
	d := C.TF_NewDimensionHandle()
	defer C.TF_DeleteDimensionHandle(d)
	for i := range dims {
		C.TF_ShapeInferenceContextDim(s.ctx, h, C.int64_t(i), d)
		dims[i] = -1
		if C.TF_DimensionHandleValueKnown(d) != 0 {
			dims[i] = int64(C.TF_DimensionHandleValue(d))
		}
	}
	return dims
}

func (s *shapeContext) emptyVector() *C.TF_ShapeHandle {
	return s.own(C.TF_ShapeInferenceContextVectorFromSize(s.ctx, 0))
}

func (s *shapeContext) scalar() *C.TF_ShapeHandle {
	return s.own(C.TF_ShapeInferenceContextScalar(s.ctx))
}

func (s *shapeContext) setOutput(i int, h *C.TF_ShapeHandle) error {
	C.TF_ShapeInferenceContextSetOutput(s.ctx, C.int(i), h, s.status)
	return statusError(s.status)
}
