package main

import (
	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/kernels/cuda"
)

// The GradReduce family: BatchNormGradReduce, the first half of the
// training gradient of batch norm synchronized across replicas: the sums of
// one replica, and its count R = N·S as an int64 scalar. families_gen.go
// binds, validates and allocates its calls from opdef (and sets count) and
// dispatches them to these calls of its kernels.

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
