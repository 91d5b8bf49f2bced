// Package cudaspec is the contract between gobn's CUDA launch layer
// (kernels/cuda, Go) and its kernels (kernels/cuda/batchnorm.cu, CUDA C++):
// the kernels the fatbin holds, the one struct every kernel takes, and the
// constants both sides use. Package cuda reads it; cmd/gencuda writes
// the C side from it (kernels/cuda/params_gen.h and kernels_gen.cuh, by
// go generate ./kernels/cuda), so that nothing on the boundary is kept in
// step by hand.
//
// A kernel is a row of Kernels: adding one is adding its row (and, for a
// new job, its device function in batchnorm.cu and its call in
// cmd/gencuda), then go generate ./kernels/cuda.
package cudaspec

import "fmt"

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

// The layout kernels' jobs: each reads the activation tensors in place, in
// one layout.
const (
	// Reduce leaves per-channel partial sums Σdy and Σdy·(x−μ) in the
	// workspace.
	Reduce Job = "reduce"
	// Sweep is Reduce, and writes x_backprop = dy·A (the inference gradient).
	Sweep Job = "sweep"
	// Global is Reduce, and writes BatchNormWithGlobalNormalizationGrad's dx
	// (channels last only; the per-channel inputs of the activations' type).
	Global Job = "global"
	// Apply writes x_backprop = A·(dy − M) + B·(x − μ).
	Apply Job = "apply"
)

// The finalize kernels' jobs: each adds the partial sums of every channel
// and forms the 1-D outputs, and the coefficients of Apply.
const (
	FinalizeTrain  Job = "finalize_train"  // the training gradient
	FinalizeInfer  Job = "finalize_infer"  // the inference gradient
	FinalizeReduce Job = "finalize_reduce" // BatchNormGradReduce
	FinalizeApply  Job = "finalize_apply"  // BatchNormGradApply (no sums: its inputs)
	FinalizeGlobal Job = "finalize_global" // BatchNormWithGlobalNormalizationGrad, per element type
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

func layoutKernel(job Job, l Layout, e Elem, v int) Kernel {
	return Kernel{Key: Key{Job: job, Layout: l, Elem: e, V: v}, U: Rows(l, e, v)}
}

// Kernels is every kernel of the fatbin, in the order package cuda numbers
// them: the finalize kernels, then the layout kernels of each element type
// and vector width, then Global's.
var Kernels = func() []Kernel {
	ks := []Kernel{
		{Key: Key{Job: FinalizeTrain}}, {Key: Key{Job: FinalizeInfer}},
		{Key: Key{Job: FinalizeReduce}}, {Key: Key{Job: FinalizeApply}},
		{Key: Key{Job: FinalizeGlobal, Elem: Float32}}, {Key: Key{Job: FinalizeGlobal, Elem: Float16}},
	}
	for _, e := range []Elem{Float32, Float16, BFloat16} {
		for _, v := range Widths(e) {
			for _, job := range []Job{Reduce, Sweep, Apply} {
				for _, l := range []Layout{ChannelsLast, ChannelsFirst} {
					ks = append(ks, layoutKernel(job, l, e, v))
				}
			}
		}
	}
	// BatchNormWithGlobalNormalizationGrad has no bfloat16 GPU kernel.
	for _, e := range []Elem{Float32, Float16} {
		for _, v := range Widths(e) {
			ks = append(ks, layoutKernel(Global, ChannelsLast, e, v))
		}
	}
	return ks
}()

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
	// Per-channel outputs, C elements each, in the finalize kernel's order.
	Out     [5]Ptr
	N, C, S int64
	// Count is R, the element count the coefficients divide by.
	Count int64
	// Splits is the partial sums per channel in Partial (0: the sums are
	// zero).
	Splits                  int32
	Epsilon                 float32
	ScaleAfterNormalization int32
}
