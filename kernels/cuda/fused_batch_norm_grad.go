package cuda

import (
	"slices"

	"github.com/gobn/gobn/internal/cudaspec"
	"github.com/gobn/gobn/kernels"
)

// FusedGradArgs are the arguments of the FusedBatchNormGrad family on the
// device: what stock TensorFlow's GPU kernels take.
type FusedGradArgs struct {
	Dims  kernels.Dims
	DType DType
	// IsTraining says which gradient the call computes: training's or
	// inference's.
	IsTraining bool
	// YBackprop, X and XBackprop have Dims.Len() elements of DType.
	YBackprop, X Ptr
	// Scale, ReserveSpace1 and ReserveSpace2 are float32 [C]. Training:
	// ReserveSpace1 is the batch mean and ReserveSpace2 the inverse standard
	// deviation 1/sqrt(σ²+ε) that stock's GPU forward (cuDNN) saves; Epsilon
	// is not used. Inference: the population mean and variance.
	Scale, ReserveSpace1, ReserveSpace2 Ptr
	Epsilon                             float32
	// XBackprop may be YBackprop or X (in place). ScaleBackprop and
	// OffsetBackprop are float32 [C].
	XBackprop, ScaleBackprop, OffsetBackprop Ptr
}

// FusedBatchNormGrad runs the FusedBatchNormGrad family's gradient
// (training or inference, as a.IsTraining says) on the device that holds
// the tensors.
func FusedBatchNormGrad(a FusedGradArgs, pl Placement) error {
	return run(a, pl, a.XBackprop, a.ScaleBackprop)
}

// The FusedBatchNormGrad family's kernels beyond the shared passes: the
// finalize kernels of training (finalize_train: var is the inverse
// standard deviation; the apply pass's coefficients too) and inference
// (finalize_infer: var is the population variance).
const finalizeTrain, finalizeInfer cudaspec.Job = "finalize_train", "finalize_infer"

var _ = addKernels(slices.Concat(
	cudaspec.FinalizeKernel(finalizeTrain, "finalize_train(p)", []string{"scale_backprop", "offset_backprop"}),
	cudaspec.FinalizeKernel(finalizeInfer, "finalize_infer(p)", []string{"scale_backprop", "offset_backprop"}),
)...)

func (a FusedGradArgs) plan() (plan, error) {
	// Training: reduce, finalize, apply; inference: x_backprop does not
	// depend on the sums, and the sweep writes it.
	job, finalize, apply := cudaspec.Sweep, kernelFor(cudaspec.Key{Job: finalizeInfer}), cudaspec.Job("")
	if a.IsTraining {
		job, finalize, apply = cudaspec.Reduce, kernelFor(cudaspec.Key{Job: finalizeTrain}), cudaspec.Apply
	}
	base, err := callParams(a.Dims, a.DType, params{
		Dy: a.YBackprop, X: a.X, DX: a.XBackprop,
		Mean: a.ReserveSpace1, Scale: a.Scale, Var: a.ReserveSpace2,
		Out:     outputs(finalize, map[string]Ptr{"scale_backprop": a.ScaleBackprop, "offset_backprop": a.OffsetBackprop}),
		Epsilon: a.Epsilon,
	})
	if err != nil || a.Dims.C == 0 {
		return plan{}, err // no channels: nothing to launch
	}
	return reducePlan(a.Dims, a.DType, job, finalize, apply, base, a.YBackprop, a.X, a.XBackprop), nil
}

// WorkspaceBytes returns the device memory the call needs for the args'
// dims, dtype and addresses (the vector width depends on their alignment).
func (a FusedGradArgs) WorkspaceBytes() int64 { return workspaceOf(a) }
