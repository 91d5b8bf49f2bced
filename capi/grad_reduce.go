package main

import (
	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/kernels/cuda"
)

// The GradReduce family: BatchNormGradReduce, the first half of the
// training gradient of batch norm synchronized across replicas. Its binders
// (families_gen.go) come from opdef.

// gradReduce validates one call, allocates its outputs and runs it on k's
// device: the sums of one replica, and its count R = N·S as an int64 scalar.
func (k *kernel) gradReduce(in []tensor, allocate allocator, dev gpuCall) error {
	b, g, err := k.bindGradReduce(in)
	if err != nil {
		return err
	}
	out, err := k.allocateGradReduce(&b, allocate)
	if err != nil {
		return err
	}
	view[int64](out.count)[0] = g.N * g.S // host memory on every device
	return k.runGradReduce(g, &b, &out, dev)
}

// gradReduceCPU runs the Go kernel with T.
func gradReduceCPU[T kernels.Element](_ *kernel, d kernels.Dims, in *gradReduceIn, out *gradReduceOut) {
	kernels.GradReduce(kernels.GradReduceArgs[T]{
		Dims:      d,
		YBackprop: view[T](in.yBackprop),
		X:         view[T](in.x),
		Mean:      view[float32](in.mean),
		SumDy:     view[float32](out.sumDy),
		SumDyXmu:  view[float32](out.sumDyXmu),
	})
}

// gradReduceGPU runs the CUDA kernel with T's type t.
func gradReduceGPU(_ *kernel, t cuda.DType, d kernels.Dims, in *gradReduceIn, out *gradReduceOut, dev gpuCall) error {
	return launch(cuda.GradReduceArgs{
		Dims: d, DType: t,
		YBackprop: ptr(in.yBackprop), X: ptr(in.x), Mean: ptr(in.mean),
		SumDy: ptr(out.sumDy), SumDyXmu: ptr(out.sumDyXmu),
	}, cuda.GradReduce, dev)
}
