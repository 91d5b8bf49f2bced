package cuda

import (
	"fmt"
	"slices"

	"github.com/gobn/gobn/internal/cudaspec"
	"github.com/gobn/gobn/kernels"
)

// GlobalNormalizationArgs are the arguments of
// BatchNormWithGlobalNormalizationGrad on the device: channels last, every
// tensor of DType (Float32 or Float16).
type GlobalNormalizationArgs struct {
	Dims                     kernels.Dims
	DType                    DType
	T, M, V, Gamma, Backprop Ptr
	VarianceEpsilon          float32
	ScaleAfterNormalization  bool
	// DX may be T or Backprop (in place).
	DX, DM, DV, DB, DG Ptr
}

// GlobalNormalizationGrad runs BatchNormWithGlobalNormalizationGrad.
func GlobalNormalizationGrad(a GlobalNormalizationArgs, pl Placement) error {
	return run(a, pl, a.DX, a.DB)
}

// The GlobalNormalizationGrad family's kernels, float32 and half
// (BatchNormWithGlobalNormalizationGrad has no bfloat16 GPU kernel): its
// layout job, reduce_cl with kGlobal, which writes dx as it sums (channels
// last only; the per-channel inputs of the activations' type), and its
// finalize, per element type.
const global, finalizeGlobal cudaspec.Job = "global", "finalize_global"

var _ = addKernels(slices.Concat(
	cudaspec.LayoutKernels(global, "reduce_cl<{T}, {T}, {V}, kGlobal, {U}>(p)", []cudaspec.Layout{cudaspec.ChannelsLast},
		cudaspec.Float32, cudaspec.Float16),
	cudaspec.FinalizeKernel(finalizeGlobal, "global_finalize<{T}>(p)", []string{"dm", "dv", "db", "dg"},
		cudaspec.Float32, cudaspec.Float16),
)...)

// scaleAfterNormalization is the bit of Params.Flags that says
// scale_after_normalization.
var scaleAfterNormalization = sharedConstant("kScaleAfterNormalization", 1)

func (a GlobalNormalizationArgs) plan() (plan, error) {
	if err := checkDims(a.Dims, a.DType); err != nil {
		return plan{}, err
	}
	if a.Dims.Layout != kernels.ChannelsLast {
		return plan{}, fmt.Errorf("gobn: BatchNormWithGlobalNormalizationGrad is channels-last only")
	}
	if a.DType == BFloat16 {
		return plan{}, fmt.Errorf("gobn: BatchNormWithGlobalNormalizationGrad has no bfloat16 GPU kernel")
	}
	var flags int32
	if a.ScaleAfterNormalization {
		flags |= scaleAfterNormalization
	}
	finalize := kernelFor(cudaspec.Key{Job: finalizeGlobal, Elem: a.DType.elem()})
	base, err := callParams(a.Dims, a.DType, params{
		Dy: a.Backprop, X: a.T, DX: a.DX, Mean: a.M, Scale: a.Gamma, Var: a.V,
		Out:     outputs(finalize, map[string]Ptr{"dm": a.DM, "dv": a.DV, "db": a.DB, "dg": a.DG}),
		Epsilon: a.VarianceEpsilon, Flags: flags,
	})
	if err != nil || a.Dims.C == 0 {
		return plan{}, err
	}
	return reducePlan(a.Dims, a.DType, global, finalize, "", base, a.Backprop, a.T, a.DX), nil
}

// WorkspaceBytes returns the device memory the call needs for the args'
// dims, dtype and addresses (the vector width depends on their alignment).
func (a GlobalNormalizationArgs) WorkspaceBytes() int64 { return workspaceOf(a) }
