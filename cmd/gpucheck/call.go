package main

import (
	"fmt"

	"github.com/gobn/gobn/kernels/cuda"
)

// call is a gobncheck_call in Go's types: one call of a family's CUDA path,
// as gobncheck_gpu and gobncheck_workspace take it.
type call struct {
	family, dtype, layout int
	n, c, s               int64
	flag                  bool
	count                 int64
	epsilon               float32
	tensors               [maxTensors]cuda.Ptr
}

// maxTensors is the most tensors a family takes (global's ten).
const maxTensors = 10

// The family codes.
const (
	familyFused = iota
	familyGlobal
	familyReduce
	familyApply
)

// job is a call's args in the kernels/cuda package (cuda.FusedGradArgs, ...)
// and the function that runs them. The GPU entry and the workspace query
// share it: a workspace depends on the addresses too (the vector width the
// kernels run with follows their alignment).
type job struct {
	args interface{ WorkspaceBytes() int64 }
	run  func(cuda.Placement) error
}

// bind pairs args with the kernels/cuda function that runs them.
func bind[A interface{ WorkspaceBytes() int64 }](args A, run func(A, cuda.Placement) error) job {
	return job{args: args, run: func(p cuda.Placement) error { return run(args, p) }}
}

// job builds c's family's args from its dims, scalars and tensors, each
// family's in the order the package doc lists them.
func (c call) job() (job, error) {
	d, err := makeDims(c.layout, c.n, c.c, c.s)
	if err != nil {
		return job{}, err
	}
	t, dtype := c.tensors, cuda.DType(c.dtype)
	switch c.family {
	case familyFused:
		return bind(cuda.FusedGradArgs{
			Dims: d, DType: dtype, IsTraining: c.flag, Epsilon: c.epsilon,
			YBackprop: t[0], X: t[1], Scale: t[2], ReserveSpace1: t[3], ReserveSpace2: t[4],
			XBackprop: t[5], ScaleBackprop: t[6], OffsetBackprop: t[7],
		}, cuda.FusedBatchNormGrad), nil
	case familyGlobal:
		return bind(cuda.GlobalNormalizationArgs{
			Dims: d, DType: dtype, ScaleAfterNormalization: c.flag, VarianceEpsilon: c.epsilon,
			T: t[0], M: t[1], V: t[2], Gamma: t[3], Backprop: t[4],
			DX: t[5], DM: t[6], DV: t[7], DB: t[8], DG: t[9],
		}, cuda.GlobalNormalizationGrad), nil
	case familyReduce:
		return bind(cuda.GradReduceArgs{
			Dims: d, DType: dtype,
			YBackprop: t[0], X: t[1], Mean: t[2], SumDy: t[3], SumDyXmu: t[4],
		}, cuda.GradReduce), nil
	case familyApply:
		return bind(cuda.GradApplyArgs{
			Dims: d, DType: dtype, Count: c.count, Epsilon: c.epsilon,
			YBackprop: t[0], X: t[1], Scale: t[2], Mean: t[3], Variance: t[4], SumDy: t[5], SumDyXmu: t[6],
			XBackprop: t[7],
		}, cuda.GradApply), nil
	}
	return job{}, fmt.Errorf("family code %d, want 0 (fused) to 3 (apply)", c.family)
}
