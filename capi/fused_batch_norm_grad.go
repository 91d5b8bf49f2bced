package main

import (
	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/kernels/cuda"
)

// The FusedBatchNormGrad family: FusedBatchNormGrad, V2 and V3, training
// and inference (is_training). families_gen.go binds, validates and
// allocates its calls from opdef, sets their tensors in the kernels' args
// these calls take (gencapi reads the args' types here) and dispatches them
// to these calls, which set the attrs.

// fusedBatchNormGradCPU runs the Go kernel, training's or inference's.
func fusedBatchNormGradCPU[T kernels.Element](k *kernel, a kernels.FusedGradArgs[T]) {
	a.Epsilon = k.epsilon
	if k.isTraining {
		kernels.TrainingGrad(a)
	} else {
		kernels.InferenceGrad(a)
	}
}

// fusedBatchNormGradGPU runs the CUDA kernel.
func fusedBatchNormGradGPU(k *kernel, a cuda.FusedGradArgs, dev gpuCall) error {
	a.IsTraining, a.Epsilon = k.isTraining, k.epsilon
	return launch(a, cuda.FusedBatchNormGrad, dev)
}
