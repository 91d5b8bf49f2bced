package cuda

import (
	"fmt"

	"github.com/gobn/gobn/internal/cudaspec"
	"github.com/gobn/gobn/kernels"
)

// GradApplyArgs are the arguments of BatchNormGradApply on the device. The
// per-channel tensors are float32 [C]; Count (R over every replica) is a host
// value, positive when the tensor is not empty.
type GradApplyArgs struct {
	Dims                                                 kernels.Dims
	DType                                                DType
	YBackprop, X, Scale, Mean, Variance, SumDy, SumDyXmu Ptr
	Count                                                int64
	Epsilon                                              float32
	// XBackprop may be YBackprop or X (in place).
	XBackprop Ptr
}

// GradApply runs BatchNormGradApply.
func GradApply(a GradApplyArgs, pl Placement) error { return run(a, pl, a.XBackprop) }

// The GradApply family's kernel beyond the shared passes: its finalize,
// which forms the apply pass's coefficients from the sums it is given (it
// writes no output).
const finalizeApply cudaspec.Job = "finalize_apply"

var _ = addKernels(cudaspec.FinalizeKernel(finalizeApply, "finalize_apply(p)", nil)...)

func (a GradApplyArgs) plan() (plan, error) {
	d, C := a.Dims, a.Dims.C
	base, err := callParams(d, a.DType, params{
		Dy: a.YBackprop, X: a.X, DX: a.XBackprop,
		Mean: a.Mean, Scale: a.Scale, Var: a.Variance,
		SumDy: a.SumDy, SumDyXmu: a.SumDyXmu, Epsilon: a.Epsilon,
	})
	if err != nil || d.Len() == 0 {
		return plan{}, err
	}
	if a.Count <= 0 {
		return plan{}, fmt.Errorf("gobn: count %d, want a positive count", a.Count)
	}
	g := layoutGeometry(d, a.DType, targetBlocks, a.YBackprop, a.X, a.XBackprop)
	w := workspaceLayout(0, C)
	// The sums are over every replica: so is the count.
	base.Count, base.Coef = a.Count, Ptr(w.coef)
	return plan{workspace: w.total, launches: []launch{
		finalizeLaunch(kernelFor(cudaspec.Key{Job: finalizeApply}), C, base),
		{kernel: g.kernel(cudaspec.Apply, a.DType), grid: g.grid, block: g.block, params: base},
	}}, nil
}

// WorkspaceBytes returns the device memory the call needs for the args'
// dims, dtype and addresses (the vector width depends on their alignment).
func (a GradApplyArgs) WorkspaceBytes() int64 { return workspaceOf(a) }
