package main

import (
	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/kernels/cuda"
)

// The GradApply family: BatchNormGradApply, the second half of the training
// gradient of batch norm synchronized across replicas: x_backprop from the
// global sums. families_gen.go binds, validates (the value of count
// included) and allocates its calls from opdef, sets their tensors and
// count in the kernels' args these calls take (gencapi reads the args'
// types here) and dispatches them to these calls, which set the attrs.

// gradApplyCPU runs the Go kernel.
func gradApplyCPU[T kernels.Element](k *kernel, a kernels.GradApplyArgs[T]) {
	a.Epsilon = k.epsilon
	kernels.GradApply(a)
}

// gradApplyGPU runs the CUDA kernel.
func gradApplyGPU(k *kernel, a cuda.GradApplyArgs, dev gpuCall) error {
	a.Epsilon = k.epsilon
	return launch(a, cuda.GradApply, dev)
}
