package main

import (
	"fmt"
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

// view returns t's elements as a []E. It panics if t's byte size does not
// match its dims and E, which would make the slice run past the buffer.
func view[E any](t tensor) []E {
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
// allocated with a set may take over the buffer of one of its inputs (the
// lowest first) when TensorFlow finds that nothing else references it, as
// its own kernels do for outputs computed element by element: the kernels
// read an element of y_backprop and x before they write that element of
// x_backprop, and the pass that writes x_backprop then writes into lines it
// has just read, instead of fetching fresh ones from memory.
type inputSet uint32

const (
	dyOrX       inputSet = 1<<0 | 1<<1 // y_backprop, x: FusedBatchNormGrad*, BatchNormGradApply
	backpropOrT inputSet = 1<<0 | 1<<4 // t, backprop: BatchNormWithGlobalNormalizationGrad
)

// A kernel call allocates nothing on Go's heap when it succeeds (each
// allocation of a small op's call made the collector run more often, and its
// background sweeper took CPU from TensorFlow's threads): outputs are held in
// an array on the stack, and the dims handed to the allocator, which escape
// through its func value, are an input's (which the call owns) or these.
const maxOutputs = 8

var (
	emptyVectorDims = []int64{0}
	scalarDims      = []int64{}
)

// kernel is one instantiated gobn op: its spec, its attrs, and whether it
// runs the GPU kernels (TensorFlow placed it on a GPU) or the CPU ones.
type kernel struct {
	op                      opdef.Op
	onGPU                   bool
	calls                   *atomic.Uint64 // its entry of kernelCalls (or xlaCalls)
	dtype                   opdef.DType    // attr T
	dataFormat              string
	isTraining              bool
	epsilon                 float32 // epsilon or variance_epsilon
	scaleAfterNormalization bool
}

// attrSource reads the attrs of a kernel: TensorFlow's at construction
// (attrs.go), or an XLA call's (xla.go).
type attrSource interface {
	dtype(name string) (opdef.DType, error)
	float(name string) (float32, error)
	bool(name string) (bool, error)
	string(name string) (string, error)
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

// readAttrs sets the attrs k's op declares from attrs, and confirms that
// k's device has a kernel for its T.
func (k *kernel) readAttrs(attrs attrSource) error {
	var err error
	for _, a := range k.op.Attrs {
		switch a.Name {
		case "T":
			k.dtype, err = attrs.dtype(a.Name)
		case "epsilon", "variance_epsilon":
			k.epsilon, err = attrs.float(a.Name)
		case "data_format":
			k.dataFormat, err = attrs.string(a.Name)
		case "is_training":
			k.isTraining, err = attrs.bool(a.Name)
		case "scale_after_normalization":
			k.scaleAfterNormalization, err = attrs.bool(a.Name)
		}
		if err != nil {
			return err
		}
	}
	return k.bound()
}

// bound confirms what TensorFlow's registrations promise: opdef binds k's
// T to a kernel of k's device. It is checked once, when TensorFlow makes
// the kernel; the devices' dispatch runs what it binds.
func (k *kernel) bound() error {
	if !k.op.HasKernel(k.dtype, k.onGPU) {
		return internalError(fmt.Sprintf("%s: no %s kernel for T=%s", k.op.Name, deviceName(k.onGPU), k.dtype))
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

// compute validates the inputs with stock's rules, allocates the outputs and
// runs the kernel. g is the call as a GPU kernel needs it; a CPU kernel
// takes none (nil).
func (k *kernel) compute(inputs []tensor, allocate allocator, dev gpuCall) error {
	if err := k.checkDTypes(inputs); err != nil {
		return err
	}
	switch k.op.Kind {
	case opdef.GradReduce:
		return k.gradReduce(inputs, allocate, dev)
	case opdef.GradApply:
		return k.gradApply(inputs, allocate, dev)
	case opdef.GlobalNormalizationGrad:
		return k.globalNormalizationGrad(inputs, allocate, dev)
	}
	return k.fusedGrad(inputs, allocate, dev)
}

// checkDTypes confirms what TensorFlow's type constraints already promise:
// a mismatch is a bug (Internal), not bad input.
func (k *kernel) checkDTypes(inputs []tensor) error {
	for i, in := range k.op.Inputs {
		want := k.dtype
		if in.Type == "float" || in.Type == "U" {
			want = opdef.Float
		}
		if in.Type == "int64" {
			want = opdef.Int64
		}
		if inputs[i].dtype != want {
			return internalError(fmt.Sprintf("%s: %s must be %s, got %s", k.op.Name, in.Name, want, inputs[i].dtype))
		}
	}
	return nil
}

// run runs the kernel on its device, once compute has validated the inputs
// and allocated the outputs: d is x's geometry, count the element count of
// BatchNormGradApply (R of BatchNormGradReduce is written by compute).
func (k *kernel) run(d kernels.Dims, in, out []tensor, count int64, dev gpuCall) error {
	if k.onGPU {
		return gpu{}.run(k, d, in, out, count, dev)
	}
	return cpu{}.run(k, d, in, out, count)
}

func deviceName(onGPU bool) string {
	if onGPU {
		return "GPU"
	}
	return "CPU"
}

func (k *kernel) fusedGrad(in []tensor, allocate allocator, dev gpuCall) error {
	g, err := opdef.CheckFusedGrad(k.dataFormat, opdef.FusedGradInputs{
		YBackprop: in[0].dims, X: in[1].dims, Scale: in[2].dims,
		ReserveSpace1: in[3].dims, ReserveSpace2: in[4].dims,
	})
	if err != nil {
		return err
	}
	var buf [maxOutputs]tensor
	out := buf[:len(k.op.Outputs)]
	for i := range out {
		dtype, dims, reuse := opdef.Float, in[2].dims, inputSet(0) // scale's: [C], as checked
		switch {
		case i == 0:
			dtype, dims, reuse = k.dtype, in[1].dims, dyOrX
		case k.op.Outputs[i].Shape.Empty:
			dims = emptyVectorDims
		}
		if out[i], err = allocate(i, dtype, dims, reuse); err != nil {
			return err
		}
	}
	return k.run(kernels.Dims{N: g.N, C: g.C, S: g.S, Layout: layout(g)}, in, out, 0, dev)
}

func (k *kernel) globalNormalizationGrad(in []tensor, allocate allocator, dev gpuCall) error {
	g, err := opdef.CheckGlobalNormalizationGrad(opdef.GlobalNormalizationGradInputs{
		T: in[0].dims, M: in[1].dims, V: in[2].dims, Gamma: in[3].dims, Backprop: in[4].dims,
	})
	if err != nil {
		return err
	}
	var buf [maxOutputs]tensor
	out := buf[:len(k.op.Outputs)]
	for i := range out {
		dims, reuse := in[1].dims, inputSet(0) // m's: [C], as checked
		if i == 0 {
			dims, reuse = in[0].dims, backpropOrT
		}
		if out[i], err = allocate(i, k.dtype, dims, reuse); err != nil {
			return err
		}
	}
	return k.run(kernels.Dims{N: g.N, C: g.C, S: g.S, Layout: kernels.ChannelsLast}, in, out, 0, dev)
}

func layout(g opdef.Geometry) kernels.Layout {
	if g.ChannelsLast {
		return kernels.ChannelsLast
	}
	return kernels.ChannelsFirst
}
