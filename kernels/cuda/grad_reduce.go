package cuda

import (
	"github.com/gobn/gobn/internal/cudaspec"
	"github.com/gobn/gobn/kernels"
)

// GradReduceArgs are the arguments of BatchNormGradReduce on the device.
// Mean, SumDy and SumDyXmu are float32 [C]; the count R is the caller's.
type GradReduceArgs struct {
	Dims               kernels.Dims
	DType              DType
	YBackprop, X, Mean Ptr
	SumDy, SumDyXmu    Ptr
}

// GradReduce runs BatchNormGradReduce's sums.
func GradReduce(a GradReduceArgs, pl Placement) error { return run(a, pl, a.SumDy) }

// The GradReduce family's kernel beyond the shared passes: its finalize,
// which writes the sums.
const finalizeReduce cudaspec.Job = "finalize_reduce"

var _ = addKernels(cudaspec.FinalizeKernel(finalizeReduce, "finalize_reduce(p)", []string{"sum_dy", "sum_dy_xmu"})...)

func (a GradReduceArgs) plan() (plan, error) {
	finalize := kernelFor(cudaspec.Key{Job: finalizeReduce})
	base, err := callParams(a.Dims, a.DType, params{
		Dy: a.YBackprop, X: a.X, Mean: a.Mean,
		Out: outputs(finalize, map[string]Ptr{"sum_dy": a.SumDy, "sum_dy_xmu": a.SumDyXmu}),
	})
	if err != nil || a.Dims.C == 0 {
		return plan{}, err // no channels: nothing to launch
	}
	return reducePlan(a.Dims, a.DType, cudaspec.Reduce, finalize, "", base, a.YBackprop, a.X), nil
}

// WorkspaceBytes returns the device memory the call needs for the args'
// dims, dtype and addresses (the vector width depends on their alignment).
func (a GradReduceArgs) WorkspaceBytes() int64 { return workspaceOf(a) }
