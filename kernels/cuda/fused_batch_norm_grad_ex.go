package cuda

import (
	"fmt"
	"slices"

	"github.com/gobn/gobn/internal/cudaspec"
	"github.com/gobn/gobn/kernels"
)

// FusedGradExArgs are the arguments of FusedBatchNormGradEx on the device:
// FusedGradArgs' (reserve_space_2 the inverse standard deviation in
// training, as stock's GPU forward saves it) and the activation's output Y.
type FusedGradExArgs struct {
	Dims  kernels.Dims
	DType DType
	// IsTraining says which gradient of dz the call computes: training's or
	// inference's.
	IsTraining bool
	// YBackprop, X and Y have Dims.Len() elements of DType.
	YBackprop, X, Y Ptr
	// Scale, ReserveSpace1 and ReserveSpace2 are float32 [C], as
	// FusedGradArgs'. ReserveSpace3 and Offset are what cuDNN's gradient
	// takes; the kernels read neither.
	Scale, ReserveSpace1, ReserveSpace2, ReserveSpace3, Offset Ptr
	Epsilon                                                    float32
	// ActivationMode is Identity, Relu or Relu6; NumSideInputs is 1 where
	// SideInputBackprop (Dims.Len() elements of DType) is asked for, else 0.
	ActivationMode string
	NumSideInputs  int64
	// XBackprop may be YBackprop or X (in place). ScaleBackprop and
	// OffsetBackprop are float32 [C].
	XBackprop, ScaleBackprop, OffsetBackprop, SideInputBackprop Ptr
}

// FusedBatchNormGradEx runs FusedBatchNormGradEx (training or inference, as
// a.IsTraining says) on the device that holds the tensors.
func FusedBatchNormGradEx(a FusedGradExArgs, pl Placement) error {
	return run(a, pl, a.XBackprop, a.ScaleBackprop)
}

// The FusedBatchNormGradEx kind's kernels beyond the shared passes: those
// passes on dz, the gradient masked where dy is loaded (Masked in
// batchnorm.cu), reading y, and writing side_input_backprop in the sweep
// (inference) and apply (training) passes. The finalize kernels are
// FusedBatchNormGrad's.
const reduceEx, sweepEx, applyEx cudaspec.Job = "reduce_ex", "sweep_ex", "apply_ex"

var _ = addKernels(exRows(slices.Concat(
	cudaspec.WithTensors(cudaspec.LayoutKernels(reduceEx,
		"reduce_{L}<{T}, float, {V}, kSums, {U}, Masked<tensor::reduce_ex::y, -1>>(p)", cudaspec.Layouts, cudaspec.Elems...),
		"y"),
	cudaspec.WithTensors(cudaspec.LayoutKernels(sweepEx,
		"reduce_{L}<{T}, float, {V}, kSweep, {U}, Masked<tensor::sweep_ex::y, tensor::sweep_ex::side_input_backprop>>(p)",
		cudaspec.Layouts, cudaspec.Elems...), "y", "side_input_backprop"),
	cudaspec.WithTensors(cudaspec.LayoutKernels(applyEx,
		"apply_{L}<{T}, {V}, {U}, Masked<tensor::apply_ex::y, tensor::apply_ex::side_input_backprop>>(p)",
		cudaspec.Layouts, cudaspec.Elems...), "y", "side_input_backprop"),
))...)

// exRows returns ks with the rows a step of cudaspec.Rows, but 16 elements
// a thread and step for 16-bit elements channels last, as float32's: with
// y loaded beside dy and x, their 64 bytes of each spilled registers
// (python_tests/test_cuda_build.py checks that no kernel does).
func exRows(ks []cudaspec.Kernel) []cudaspec.Kernel {
	for i, k := range ks {
		if k.Layout == cudaspec.ChannelsLast && k.Elem.Size == 2 {
			ks[i].U = max(1, 16/k.V)
		}
	}
	return ks
}

// The bits of Params.Flags of FusedBatchNormGradEx's kernels: the
// activation (neither bit: Identity), and whether side_input_backprop is
// written.
var (
	flagRelu      = sharedConstant("kRelu", 2)
	flagRelu6     = sharedConstant("kRelu6", 4)
	flagSideInput = sharedConstant("kSideInput", 8)
)

// flags returns the call's bits of Params.Flags.
func (a FusedGradExArgs) flags() (int32, error) {
	var f int32
	switch a.ActivationMode {
	case "Identity":
	case "Relu":
		f = flagRelu
	case "Relu6":
		f = flagRelu6
	default:
		return 0, fmt.Errorf("gobn: activation mode %q, want Identity, Relu or Relu6", a.ActivationMode)
	}
	if a.NumSideInputs > 0 {
		f |= flagSideInput
	}
	return f, nil
}

func (a FusedGradExArgs) plan() (plan, error) {
	flags, err := a.flags()
	if err != nil {
		return plan{}, err
	}
	// Training: reduce, finalize, apply; inference: x_backprop does not
	// depend on the sums, and the sweep writes it.
	job, finalize, apply := sweepEx, kernelFor(cudaspec.Key{Job: finalizeInfer}), cudaspec.Job("")
	if a.IsTraining {
		job, finalize, apply = reduceEx, kernelFor(cudaspec.Key{Job: finalizeTrain}), applyEx
	}
	base, err := callParams(a.Dims, a.DType, params{
		Dy: a.YBackprop, X: a.X, DX: a.XBackprop,
		Mean: a.ReserveSpace1, Scale: a.Scale, Var: a.ReserveSpace2,
		Out:     outputs(finalize, map[string]Ptr{"scale_backprop": a.ScaleBackprop, "offset_backprop": a.OffsetBackprop}),
		Epsilon: a.Epsilon, Flags: flags,
	})
	if err != nil || a.Dims.C == 0 {
		return plan{}, err // no channels: nothing to launch
	}
	p := reducePlan(a.Dims, a.DType, job, finalize, apply, base, a.YBackprop, a.X, a.XBackprop, a.Y, a.SideInputBackprop)
	own := map[string]Ptr{"y": a.Y, "side_input_backprop": a.SideInputBackprop}
	for i := range p.launches {
		l := &p.launches[i]
		named := map[string]Ptr{}
		for _, name := range table()[l.kernel].Tensors {
			named[name] = own[name]
		}
		l.params.Tensors = tensors(l.kernel, named)
	}
	return p, nil
}

// WorkspaceBytes returns the device memory the call needs for the args'
// dims, dtype and addresses (the vector width depends on their alignment).
func (a FusedGradExArgs) WorkspaceBytes() int64 { return workspaceOf(a) }
