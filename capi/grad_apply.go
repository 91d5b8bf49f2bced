package main

import (
	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/kernels/cuda"
	"github.com/gobn/gobn/opdef"
)

// The GradApply family: BatchNormGradApply, the second half of the training
// gradient of batch norm synchronized across replicas. Its binders
// (families_gen.go) come from opdef.

// gradApply validates one call, the value of count included, allocates its
// output and runs it on k's device: x_backprop from the global sums.
func (k *kernel) gradApply(in []tensor, allocate allocator, dev gpuCall) error {
	b, g, err := k.bindGradApply(in)
	if err != nil {
		return err
	}
	if err := opdef.CheckCount(view[int64](b.count)[0], g); err != nil { // host memory on every device
		return err
	}
	out, err := k.allocateGradApply(&b, allocate)
	if err != nil {
		return err
	}
	return k.runGradApply(g, &b, &out, dev)
}

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
