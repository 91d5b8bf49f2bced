package main

// #include <stdlib.h>
// #include "gobn.h"
import "C"

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/gobn/gobn/kernels/cuda"
	"github.com/gobn/gobn/opdef"
)

// gobn's kernels inside XLA: an op's XLA FFI handler (xla.c registers them,
// gobnXLACall in callback.go calls xlaCall) runs the same kernel as the op,
// on XLA's buffers. The custom call (python/gobn/_xla.py writes it) takes
// the op's inputs but those in host memory (opdef.Op.XLAInputs), returns
// its outputs but the placeholders and those in host memory
// (opdef.Op.XLAOutputs), and carries the op's attrs but T and U, which the
// buffers' types give, in its backend_config. The host-memory args stay out
// because on a GPU XLA holds every buffer in device memory:
//
//   - BatchNormGradReduce's count is the caller's to compute (R, from x's shape);
//   - BatchNormGradApply's count is taken as x's own R: the caller scales the
//     sums it passes by R / count, so that x_backprop's sums over R are the
//     sums over count it wants.

// xlaLayoutChecked reports whether the build compared xla.h's structs with
// XLA's header (xla_layout.c), for the tests.
func xlaLayoutChecked() bool { return C.gobn_xla_layout_checked() == 1 }

// xlaCalls counts the calls of each op's handlers, by GOBN_ON_GPU.
var xlaCalls = make([][2]atomic.Uint64, len(opdef.All))

// xlaDTypes are the dtypes of XLA's element types (xla.h).
var xlaDTypes = map[C.int]opdef.DType{
	C.GOBN_XLA_F32: opdef.Float, C.GOBN_XLA_F16: opdef.Half, C.GOBN_XLA_BF16: opdef.BFloat16,
	C.GOBN_XLA_F64: opdef.Double, C.GOBN_XLA_S64: opdef.Int64,
}

// xlaFrame is one call of a handler.
type xlaFrame struct {
	f *C.gobn_xla_frame
}

func (x xlaFrame) buffer(list *C.gobn_xla_buffers, i int) (tensor, error) {
	if unsafe.Slice(list.types, list.size)[i] != 1 { // 1: a buffer, XLA's only kind so far
		return tensor{}, &tfError{code: C.TF_INVALID_ARGUMENT, msg: fmt.Sprintf("gobn: XLA arg %d is no buffer", i)}
	}
	b := (*C.gobn_xla_buffer)(unsafe.Slice(list.values, list.size)[i])
	dtype, ok := xlaDTypes[b.dtype]
	if !ok {
		return tensor{}, &tfError{code: C.TF_INVALID_ARGUMENT, msg: fmt.Sprintf("gobn: XLA element type %d", int(b.dtype))}
	}
	dims := []int64{}
	if b.rank > 0 {
		dims = unsafe.Slice((*int64)(unsafe.Pointer(b.dims)), int(b.rank))
	}
	n := int64(dtype.Size())
	for _, d := range dims {
		n *= d
	}
	return tensor{dtype: dtype, dims: dims, data: b.data, bytes: int(n)}, nil
}

// onlyAttrsOf confirms that the call's backend_config carries no attr but
// op's (those the custom call takes: all but the type attrs): one it does
// not know is refused, not dropped.
func (x xlaFrame) onlyAttrsOf(op opdef.Op) error {
	a := &x.f.attrs
	for i := range int(a.size) {
		n := unsafe.Slice(a.names, a.size)[i]
		name := C.GoStringN(n.ptr, C.int(n.len))
		if attr, ok := op.Attr(name); !ok || attr.Kind == opdef.TypeAttr {
			return &tfError{code: C.TF_INVALID_ARGUMENT, msg: "gobn: the XLA call of " + op.Name + " has the attr " + name + ", which the op does not take"}
		}
	}
	return nil
}

// attr returns the backend_config attr called name, of the type want.
func (x xlaFrame) attr(name string, want C.int) (unsafe.Pointer, error) {
	a := &x.f.attrs
	for i := range int(a.size) {
		n := unsafe.Slice(a.names, a.size)[i]
		if C.GoStringN(n.ptr, C.int(n.len)) != name {
			continue
		}
		if unsafe.Slice(a.types, a.size)[i] != want {
			break
		}
		return unsafe.Slice(a.attrs, a.size)[i], nil
	}
	return nil, &tfError{code: C.TF_INVALID_ARGUMENT, msg: "gobn: the XLA call has no attr " + name + " of the op's type"}
}

func (x xlaFrame) scalar(name string, dtype C.int) (unsafe.Pointer, error) {
	p, err := x.attr(name, C.GOBN_XLA_ATTR_SCALAR)
	if err != nil {
		return nil, err
	}
	s := (*C.gobn_xla_scalar)(p)
	if s.dtype != dtype {
		return nil, &tfError{code: C.TF_INVALID_ARGUMENT, msg: fmt.Sprintf("gobn: XLA attr %s has element type %d", name, int(s.dtype))}
	}
	return s.value, nil
}

// xlaAttrs reads a kernel's attrs from an XLA call: T from the first input
// of type T, the others from the backend_config.
type xlaAttrs struct {
	frame xlaFrame
	op    opdef.Op
	in    []tensor
}

func (a xlaAttrs) dtype(name string) (opdef.DType, error) {
	for i, arg := range a.op.Inputs {
		if arg.Type == name {
			return a.in[i].dtype, nil
		}
	}
	return 0, internalError("gobn: " + a.op.Name + " has no input of type " + name)
}

func (a xlaAttrs) float(name string) (float32, error) {
	p, err := a.frame.scalar(name, C.GOBN_XLA_F32)
	if err != nil {
		return 0, err
	}
	return *(*float32)(p), nil
}

func (a xlaAttrs) int(name string) (int64, error) {
	p, err := a.frame.scalar(name, C.GOBN_XLA_S64)
	if err != nil {
		return 0, err
	}
	return *(*int64)(p), nil
}

func (a xlaAttrs) bool(name string) (bool, error) {
	p, err := a.frame.scalar(name, C.GOBN_XLA_PRED)
	if err != nil {
		return false, err
	}
	return *(*byte)(p) != 0, nil
}

func (a xlaAttrs) string(name string) (string, error) {
	p, err := a.frame.attr(name, C.GOBN_XLA_ATTR_STRING)
	if err != nil {
		return "", err
	}
	s := (*C.gobn_xla_span)(p)
	return C.GoStringN(s.ptr, C.int(s.len)), nil
}

// xlaCall runs op number op on the buffers of an XLA call, on the GPU where
// onGPU says so (the CUDA platform's handler).
func xlaCall(frame *C.gobn_xla_frame, op int, onGPU bool) error {
	x := xlaFrame{frame}
	spec := opdef.All[op]
	device := 0
	if onGPU {
		device = 1
	}
	k := &kernel{op: spec, onGPU: onGPU, calls: &xlaCalls[op][device]}
	k.calls.Add(1)
	operands := spec.XLAInputs()
	if int(frame.args.size) != len(operands) {
		return &tfError{code: C.TF_INVALID_ARGUMENT, msg: fmt.Sprintf(
			"gobn: the XLA call of %s takes %d operands, got %d", spec.Name, len(operands), frame.args.size)}
	}
	in := make([]tensor, len(spec.Inputs))
	for j, i := range operands {
		var err error
		if in[i], err = x.buffer(&frame.args, j); err != nil {
			return err
		}
	}
	if err := x.onlyAttrsOf(spec); err != nil {
		return err
	}
	if err := k.readAttrs(xlaAttrs{frame: x, op: spec, in: in}); err != nil {
		if isInternal(err) && !spec.HasKernel(k.attrs.T, onGPU) {
			return &tfError{code: C.TF_UNIMPLEMENTED, msg: fmt.Sprintf("gobn: %s has no %s kernel for T=%s",
				spec.Name, deviceName(onGPU), k.attrs.T)}
		}
		return err
	}
	var results []int // the outputs the call returns: a list only where its attr asks for it
	for _, i := range spec.XLAOutputs() {
		if k.attrs.has(spec.Outputs[i]) {
			results = append(results, i)
		}
	}
	if int(frame.rets.size) != len(results) {
		return &tfError{code: C.TF_INVALID_ARGUMENT, msg: fmt.Sprintf(
			"gobn: the XLA call of %s returns %d results, got %d", spec.Name, len(results), frame.rets.size)}
	}
	var count, countOut [1]int64 // BatchNormGradApply's count input, BatchNormGradReduce's output
	for i, arg := range spec.Inputs {
		if spec.InHostMemory(arg.Name) {
			count[0] = perChannel(in[spec.InputIndex(spec.Activation)].dims, k.attrs.DataFormat) // x's R: see above
			in[i] = tensor{dtype: opdef.Int64, dims: scalarDims, data: unsafe.Pointer(&count[0]), bytes: 8}
		}
	}
	allocate := func(i int, dtype opdef.DType, dims []int64, _ inputSet) (tensor, error) {
		for j, r := range results {
			if r == i {
				return x.result(j, dtype, dims)
			}
		}
		if spec.Outputs[i].Shape.Empty {
			return tensor{dtype: dtype, dims: dims}, nil
		}
		return tensor{dtype: dtype, dims: dims, data: unsafe.Pointer(&countOut[0]), bytes: 8}, nil // a host-memory scalar
	}
	if !onGPU {
		return k.compute(in, allocate, nil)
	}
	w := &xlaWorkspace{ctx: frame.ctx}
	defer w.free()
	return k.compute(in, allocate, w)
}

// result returns XLA's buffer for result j, which must be the output the
// kernel allocates: XLA sized it from the custom call's shape operands.
func (x xlaFrame) result(j int, dtype opdef.DType, dims []int64) (tensor, error) {
	t, err := x.buffer(&x.f.rets, j)
	if err != nil {
		return tensor{}, err
	}
	if t.dtype != dtype || opdef.ShapeString(t.dims) != opdef.ShapeString(dims) {
		return tensor{}, internalError(fmt.Sprintf("gobn: XLA result %d is %s %s, the op's output is %s %s",
			j, t.dtype, opdef.ShapeString(t.dims), dtype, opdef.ShapeString(dims)))
	}
	return t, nil
}

// perChannel returns the elements per channel of a tensor of dims in
// dataFormat: the product of every dim but the channel axis.
func perChannel(dims []int64, dataFormat string) int64 {
	channelsLast, err := opdef.ChannelsLast(dataFormat)
	if err != nil || len(dims) < 2 {
		return 0 // the op's checks reject it
	}
	axis := 1
	if channelsLast {
		axis = len(dims) - 1
	}
	r := int64(1)
	for i, d := range dims {
		if i != axis {
			r *= d
		}
	}
	return r
}

// xlaWorkspace is an XLA GPU call as its kernel sees it (a gpuCall): its
// device memory from XLA's allocator, freed when the call returns (the
// call's kernels are enqueued on XLA's stream, and the allocator orders its
// reuse on that stream, as for XLA's own scratch memory), and that stream.
type xlaWorkspace struct {
	ctx   unsafe.Pointer
	data  unsafe.Pointer
	bytes int64
}

// stream returns the stream XLA runs the call on (TensorFlow's compute
// stream), checked before its first use as TensorFlow's own is.
func (w *xlaWorkspace) stream() (cuda.Stream, error) {
	var cerr *C.gobn_xla_error
	s := C.gobn_xla_stream(w.ctx, &cerr)
	if cerr != nil {
		return 0, xlaFailure{cerr}
	}
	if s == 0 {
		return 0, fmt.Errorf("%w: XLA gave the call no stream", errNoStream)
	}
	return cuda.Stream(s), nil
}

func (w *xlaWorkspace) temp(bytes int64) (uintptr, error) {
	if w.data != nil {
		return 0, internalError("gobn: a second workspace for one XLA call")
	}
	var cerr *C.gobn_xla_error
	w.data = C.gobn_xla_allocate(w.ctx, C.size_t(bytes), &cerr)
	if cerr != nil {
		w.data = nil
		return 0, xlaFailure{cerr}
	}
	w.bytes = bytes
	return uintptr(w.data), nil
}

func (w *xlaWorkspace) free() {
	if w.data != nil {
		if cerr := C.gobn_xla_free(w.ctx, w.data, C.size_t(w.bytes)); cerr != nil {
			C.gobn_xla_error_discard(cerr)
		}
	}
}

// xlaFailure is an error XLA's own API returned: handed back to XLA as it is.
type xlaFailure struct {
	err *C.gobn_xla_error
}

func (f xlaFailure) Error() string { return "XLA FFI error" }
