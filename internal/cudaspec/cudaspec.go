// Package cudaspec is the form of the contract between gobn's CUDA launch
// layer (kernels/cuda, Go) and its kernels (kernels/cuda/batchnorm.cu,
// CUDA C++): what a kernel of the fatbin is (Kernel: its job, layout,
// element type and vector width, the device function its body calls, the
// outputs it writes), the one struct every kernel takes (Params), and the
// constants both sides use. Package cuda holds the table of kernels, the
// shared passes' and each kind's beside its launch; cmd/gencuda writes the
// C side from them (kernels/cuda/params_gen.h and kernels_gen.cuh, by go
// generate ./kernels/cuda), so that nothing on the boundary is kept in step
// by hand.
package cudaspec

import (
	"fmt"
	"strconv"
	"strings"
)

// Launch shapes both sides rest on.
const (
	// Threads is every kernel's largest block (kThreads in C): the
	// kernels' shared arrays and __launch_bounds__ are sized by it.
	Threads = 256
	// FinalizeLanes and FinalizeSplitLanes are the finalize kernels' block:
	// FinalizeLanes adjacent channels by FinalizeSplitLanes threads over the
	// splits (kLanes and kSplitLanes in C).
	FinalizeLanes      = 32
	FinalizeSplitLanes = 8
	// VectorBytes is the widest load and store a thread makes: a layout
	// kernel reads V = VectorBytes/size adjacent elements at most.
	VectorBytes = 16
)

// Job is what a kernel computes.
type Job string

// The jobs of the passes the kinds share; a kind's own jobs are its.
const (
	// Reduce leaves per-channel partial sums Σdy and Σdy·(x−μ) in the
	// workspace.
	Reduce Job = "reduce"
	// Sweep is Reduce, and writes x_backprop = dy·A (the inference gradient).
	Sweep Job = "sweep"
	// Apply writes x_backprop = A·(dy − M) + B·(x − μ).
	Apply Job = "apply"
)

// Layout is the memory order a layout kernel reads.
type Layout string

const (
	// ChannelsLast is NHWC and NDHWC (and channels first with S = 1):
	// element (r, c) at r·C + c.
	ChannelsLast Layout = "cl"
	// ChannelsFirst is NCHW and NCDHW: element (n, c, s) at (n·C + c)·S + s.
	ChannelsFirst Layout = "cf"
)

// Elem is an element type of the activation tensors.
type Elem struct {
	// Name is the type in kernel names; CType batchnorm.cu's type for it
	// (elements.cuh); Size its bytes.
	Name, CType string
	Size        int
}

// The element types the kernels take.
var (
	Float32  = Elem{"f32", "float", 4}
	Float16  = Elem{"f16", "f16", 2}
	BFloat16 = Elem{"bf16", "bf16", 2}
)

// Widths returns the vector widths V of e's layout kernels: 1, 2, ..., up
// to VectorBytes of e.
func Widths(e Elem) []int {
	var w []int
	for v := 1; v*e.Size <= VectorBytes; v *= 2 {
		w = append(w, v)
	}
	return w
}

// Key says which kernel: its job, and for a layout kernel its layout,
// element type and vector width V (the finalize kernels have none, but
// FinalizeGlobal its element type).
type Key struct {
	Job    Job
	Layout Layout
	Elem   Elem
	V      int
}

// Name returns the kernel's name in the fatbin:
// gobn_<job>_<layout>_<elem>_v<V> for a layout kernel, gobn_<job>[_<elem>]
// for a finalize kernel.
func (k Key) Name() string {
	if k.Layout == "" {
		if k.Elem.Name != "" {
			return fmt.Sprintf("gobn_%s_%s", k.Job, k.Elem.Name)
		}
		return "gobn_" + string(k.Job)
	}
	return fmt.Sprintf("gobn_%s_%s_%s_v%d", k.Job, k.Layout, k.Elem.Name, k.V)
}

// Kernel is one kernel of the fatbin.
type Kernel struct {
	Key
	// U is a layout kernel's rows (channels last) or row pieces (channels
	// first) a thread loads per unrolled step, so that each thread has
	// several loads in flight before it uses the first (Rows).
	U int
	// Call is what the kernel's body calls, a device function of
	// batchnorm.cu, with Key's and U's values for {L} (the layout: cl,
	// cf), {T} (the element type's C type), {V} and {U}: e.g.
	// "apply_{L}<{T}, {V}, {U}>(p)".
	Call string
	// Outputs names the per-channel outputs the kernel writes, in the
	// slots of Params.Out: the kernels_gen.cuh enum of its job names each
	// slot (out::<job>::<name>), and the launch layer fills the slots by
	// these names.
	Outputs []string
	// Tensors names a kind's own tensors the kernel reads or writes beyond
	// the fields of Params the kinds share (an activation the forward op
	// gave, a side input's gradient), in the slots of Params.Tensors,
	// named as Outputs are (tensor::<job>::<name>).
	Tensors []string
}

// Body returns Call with k's values in place.
func (k Kernel) Body() string {
	return strings.NewReplacer("{L}", string(k.Layout), "{T}", k.Elem.CType, "{V}", strconv.Itoa(k.V),
		"{U}", strconv.Itoa(k.U)).Replace(k.Call)
}

// Rows returns U for a layout kernel. Channels last: 16 elements of x and
// of dy a thread and step (U·V = 16), but 64 bytes of each for 16-bit
// elements with V ≥ 4, which measured faster so (bench/gpu.json, half NHWC
// training). Channels first, whose per-element offsets are 64-bit registers
// of their own: half the elements, at least two rows, so that no kernel
// spills.
func Rows(l Layout, e Elem, v int) int {
	switch {
	case l == ChannelsFirst:
		return max(8/v, 2)
	case e.Size == 2 && v >= 4:
		return 64 / (v * e.Size)
	}
	return 16 / v
}

// Elems are the element types of the activation tensors, in order.
var Elems = []Elem{Float32, Float16, BFloat16}

// Layouts are the layouts a layout kernel may read, in order.
var Layouts = []Layout{ChannelsLast, ChannelsFirst}

// LayoutKernels returns the kernels of a layout job: one for each of
// layouts, each of elems and each of its widths (Widths), with U as Rows
// gives it, each calling call.
func LayoutKernels(job Job, call string, layouts []Layout, elems ...Elem) []Kernel {
	var ks []Kernel
	for _, e := range elems {
		for _, v := range Widths(e) {
			for _, l := range layouts {
				ks = append(ks, Kernel{Key: Key{Job: job, Layout: l, Elem: e, V: v}, U: Rows(l, e, v), Call: call})
			}
		}
	}
	return ks
}

// FinalizeKernel returns the finalize kernel of job, calling call and
// writing outputs (Kernel.Outputs); with elems, one for each of them.
func FinalizeKernel(job Job, call string, outputs []string, elems ...Elem) []Kernel {
	if len(elems) == 0 {
		return []Kernel{{Key: Key{Job: job}, Call: call, Outputs: outputs}}
	}
	var ks []Kernel
	for _, e := range elems {
		ks = append(ks, Kernel{Key: Key{Job: job, Elem: e}, Call: call, Outputs: outputs})
	}
	return ks
}

// WithTensors returns ks, each naming tensors as its own (Kernel.Tensors).
func WithTensors(ks []Kernel, tensors ...string) []Kernel {
	out := make([]Kernel, len(ks))
	for i, k := range ks {
		k.Tensors = tensors
		out[i] = k
	}
	return out
}

// Ptr is a device address (a CUdeviceptr; gobn_ptr in C).
type Ptr uintptr

// Params is the one argument of every kernel, passed by value (gobn_params
// in C, laid out alike: params_gen.h asserts each field's offset).
type Params struct {
	// Activation tensors: N·C·S elements of the kernel's type in the
	// launch's layout. DX may be Dy or X itself.
	Dy, X, DX Ptr
	// Per-channel inputs, C elements: float, or the activations' type for
	// Global and FinalizeGlobal. Mean is μ; Scale is scale (γ); Var is the
	// variance, or the inverse standard deviation where the finalize
	// kernel says so.
	Mean, Scale, Var Ptr
	// BatchNormGradApply's global sums, float [C].
	SumDy, SumDyXmu Ptr
	// Workspace: partial sums, double [Splits][2][C] (Σdy, then Σdy·(x−μ));
	// and Apply's coefficients, float [3][C] (A, B, mean of dy).
	Partial, Coef Ptr
	// Per-channel outputs, C elements each, in the slots the finalize
	// kernel names (Kernel.Outputs).
	Out [5]Ptr
	// A kind's own tensors, in the slots its kernels name
	// (Kernel.Tensors); no shared pass reads them.
	Tensors [4]Ptr
	N, C, S int64
	// Count is R, the element count the coefficients divide by.
	Count int64
	// Splits is the partial sums per channel in Partial (0: the sums are
	// zero).
	Splits  int32
	Epsilon float32
	// Flags are a kind's own switches, as its kernels read them:
	// BatchNormWithGlobalNormalizationGrad's scale_after_normalization (1).
	Flags int32
}
