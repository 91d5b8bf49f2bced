package main

import (
	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/kernels/cuda"
)

// The GradApply family: BatchNormGradApply, the second half of the training
// gradient of batch norm synchronized across replicas: x_backprop from the
// global sums. families_gen.go binds, validates (the value of count
// included) and allocates its calls from opdef and dispatches them to these
// calls of its kernels.

// gradApplyCPU runs the Go kernel with T.
func gradApplyCPU[T kernels.Element](k *kernel, d kernels.Dims, in *gradApplyIn, out *gradApplyOut) {
	kernels.GradApply(kernels.GradApplyArgs[T]{
		Dims:      d,
		YBackprop: view[T](in.yBackprop),
		X:         view[T](in.x),
		Scale:     view[float32](in.scale),
		Mean:      view[float32](in.mean),
		Variance:  view[float32](in.variance),
		SumDy:     view[float32](in.sumDy),
		SumDyXmu:  view[float32](in.sumDyXmu),
		Count:     view[int64](in.count)[0],
		Epsilon:   k.epsilon,
		XBackprop: view[T](out.xBackprop),
	})
}

// gradApplyGPU runs the CUDA kernel with T's type t.
func gradApplyGPU(k *kernel, t cuda.DType, d kernels.Dims, in *gradApplyIn, out *gradApplyOut, dev gpuCall) error {
	return launch(cuda.GradApplyArgs{
		Dims: d, DType: t,
		YBackprop: ptr(in.yBackprop), X: ptr(in.x), Scale: ptr(in.scale), Mean: ptr(in.mean), Variance: ptr(in.variance),
		SumDy: ptr(in.sumDy), SumDyXmu: ptr(in.sumDyXmu), Count: view[int64](in.count)[0], Epsilon: k.epsilon,
		XBackprop: ptr(out.xBackprop),
	}, cuda.GradApply, dev)
}
