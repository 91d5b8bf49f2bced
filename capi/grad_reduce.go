package main

import (
	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/kernels/cuda"
)

// The GradReduce family: BatchNormGradReduce, the first half of the
// training gradient of batch norm synchronized across replicas: the sums of
// one replica, and its count R = N·S as an int64 scalar. families_gen.go
// binds, validates and allocates its calls from opdef (and sets count),
// sets their tensors in the kernels' args these calls take (gencapi reads
// the args' types here) and dispatches them to these calls.

// gradReduceCPU runs the Go kernel.
func gradReduceCPU[T kernels.Element](_ *kernel, a kernels.GradReduceArgs[T]) {
	kernels.GradReduce(a)
}

// gradReduceGPU runs the CUDA kernel.
func gradReduceGPU(_ *kernel, a cuda.GradReduceArgs, dev gpuCall) error {
	return launch(a, cuda.GradReduce, dev)
}
