package main

import (
	"fmt"
	"reflect"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/opdef"
)

// tensor is a TensorFlow tensor of a running kernel, seen from Go: its data
// is in host memory for a CPU kernel, and in device memory for a GPU kernel
// (but for the args the op keeps in host memory, opdef.Op.HostMemory).
type tensor struct {
	dtype opdef.DType
	dims  []int64
	data  unsafe.Pointer
	bytes int
}

// view returns t's elements as a []E, or nil for the zero tensor: an
// output a call does not have (a list of none, opdef.Arg.Number). It panics
// if t's byte size does not match its dims and E, which would make the
// slice run past the buffer.
func view[E any](t tensor) []E {
	if t.dims == nil && t.data == nil {
		return nil
	}
	n := 1
	for _, d := range t.dims {
		n *= int(d)
	}
	var zero E
	if n*int(unsafe.Sizeof(zero)) != t.bytes {
		panic(fmt.Sprintf("capi: tensor of shape %s holds %d bytes, want %d",
			opdef.ShapeString(t.dims), t.bytes, n*int(unsafe.Sizeof(zero))))
	}
	if n == 0 {
		return []E{}
	}
	return unsafe.Slice((*E)(t.data), n)
}

// allocator allocates output i of the running op, or gives it the buffer of
// one of the inputs in reuse.
type allocator func(i int, dtype opdef.DType, dims []int64, reuse inputSet) (tensor, error)

// inputSet is a set of inputs, by index: bit k is input k. An output
// allocated with a set (opdef.Arg.Forward names them) may take over the buffer of one of its inputs (the
// lowest first) when TensorFlow finds that nothing else references it, as
// its own kernels do for outputs computed element by element: the kernels
// read an element of y_backprop and x before they write that element of
// x_backprop, and the pass that writes x_backprop then writes into lines it
// has just read, instead of fetching fresh ones from memory.
type inputSet uint32

// A kernel call allocates nothing on Go's heap when it succeeds (each
// allocation of a small op's call made the collector run more often, and its
// background sweeper took CPU from TensorFlow's threads): a family's bound
// inputs and outputs are structs on the stack, and the dims handed to the
// allocator, which escape through its func value, are an input's (which the
// call owns) or these.
var (
	emptyVectorDims = []int64{0}
	scalarDims      = []int64{}
)

// kernel is one instantiated gobn op: its spec, its attrs (attrs_gen.go),
// and whether it runs the GPU kernels (TensorFlow placed it on a GPU) or
// the CPU ones.
type kernel struct {
	op    opdef.Op
	onGPU bool
	calls *atomic.Uint64 // its entry of kernelCalls (or xlaCalls)
	attrs attrs
}

// attrSource reads the attrs of a kernel, a method for each kind of attr
// (opdef.AttrKind): TensorFlow's at construction (attrs.go), or an XLA
// call's (xla.go).
type attrSource interface {
	dtype(name string) (opdef.DType, error)
	float(name string) (float32, error)
	bool(name string) (bool, error)
	string(name string) (string, error)
	int(name string) (int64, error)
}

// newKernel reads the attrs op number op declares, for a kernel registered
// with flags (gobn.h: GOBN_ON_GPU, GOBN_AS_STOCK).
func newKernel(op, flags int, attrs attrSource) (*kernel, error) {
	k := &kernel{op: opdef.All[op], onGPU: flags&gobnOnGPU != 0, calls: &kernelCalls[op][flags]}
	if err := k.readAttrs(attrs); err != nil {
		return nil, err
	}
	return k, nil
}

// readAttrs sets the attrs k's op declares from src, and confirms that
// k's device has a kernel for its T.
func (k *kernel) readAttrs(src attrSource) error {
	if err := k.attrs.read(k.op, src); err != nil {
		return err
	}
	return k.bound()
}

// read sets the attrs op declares from src, each in the field of a tagged
// with its name (attrs_gen.go), read by its kind and checked by the op's
// rules (opdef.Op.CheckAttr). An attr no field is tagged with (attrs_gen.go
// is stale) is an error, not dropped.
func (a *attrs) read(op opdef.Op, src attrSource) error {
	fields := reflect.ValueOf(a).Elem()
	for _, attr := range op.Attrs {
		i := slices.IndexFunc(reflect.VisibleFields(fields.Type()), func(f reflect.StructField) bool {
			return f.Tag.Get("attr") == attr.Name
		})
		if i < 0 {
			return internalError("capi: " + op.Name + " has the attr " + attr.Name + ", which attrs_gen.go has no field of: run go generate ./capi")
		}
		value, err := readAttr(src, attr)
		if err != nil {
			return err
		}
		if err := op.CheckAttr(attr, value); err != nil {
			return err
		}
		fields.Field(i).Set(reflect.ValueOf(value))
	}
	return nil
}

// readAttr reads attr from src by its kind.
func readAttr(src attrSource, attr opdef.Attr) (any, error) {
	switch attr.Kind {
	case opdef.TypeAttr:
		return src.dtype(attr.Name)
	case opdef.FloatAttr:
		return src.float(attr.Name)
	case opdef.BoolAttr:
		return src.bool(attr.Name)
	case opdef.StringAttr:
		return src.string(attr.Name)
	case opdef.IntAttr:
		return src.int(attr.Name)
	}
	return nil, internalError(fmt.Sprintf("capi: the attr %s is of kind %d, which capi does not read", attr.Name, attr.Kind))
}

// bound confirms what TensorFlow's registrations promise: opdef binds k's
// T to a kernel of k's device. It is checked once, when TensorFlow makes
// the kernel; the devices' dispatch runs what it binds.
func (k *kernel) bound() error {
	if !k.op.HasKernel(k.attrs.T, k.onGPU) {
		return internalError(fmt.Sprintf("%s: no %s kernel for T=%s", k.op.Name, deviceName(k.onGPU), k.attrs.T))
	}
	return nil
}

// call runs the kernel on the inputs of one TensorFlow call.
func (k *kernel) call(c *call) error {
	k.calls.Add(1)
	inputs, total, err := c.inputs(len(k.op.Inputs))
	if err != nil {
		return err
	}
	if total != len(k.op.Inputs) { // TensorFlow checks the op's signature first
		return internalError(fmt.Sprintf("%s: got %d inputs, want %d", k.op.Name, total, len(k.op.Inputs)))
	}
	return k.compute(inputs, c.allocate, c)
}

// checkDTypes confirms what TensorFlow's type constraints already promise,
// that input i has dtype want[i] (the family's binder reads it from opdef):
// a mismatch is a bug (Internal), not bad input.
func (k *kernel) checkDTypes(in []tensor, want []opdef.DType) error {
	for i := range in {
		if in[i].dtype != want[i] {
			return internalError(fmt.Sprintf("%s: %s must be %s, got %s", k.op.Name, k.op.Inputs[i].Name, want[i], in[i].dtype))
		}
	}
	return nil
}

// check applies the op's rules (opdef.Op.Check) to the inputs' shapes.
func (k *kernel) check(in []tensor) (opdef.Geometry, error) {
	var shapes [maxInputs][]int64
	for i := range in {
		shapes[i] = in[i].dims
	}
	return k.op.Check(k.attrs.DataFormat, shapes[:len(in)])
}

// noKernel reports a T without a kernel on k's device, which bound has ruled
// out when TensorFlow made the kernel.
func (k *kernel) noKernel() error {
	return internalError(fmt.Sprintf("capi: no %s kernel of %s for T=%s", deviceName(k.onGPU), k.op.Name, k.attrs.T))
}

func deviceName(onGPU bool) string {
	if onGPU {
		return "GPU"
	}
	return "CPU"
}

// kernelDims is the geometry g as the kernels take it.
func kernelDims(g opdef.Geometry) kernels.Dims {
	layout := kernels.ChannelsFirst
	if g.ChannelsLast {
		layout = kernels.ChannelsLast
	}
	return kernels.Dims{N: g.N, C: g.C, S: g.S, Layout: layout}
}
