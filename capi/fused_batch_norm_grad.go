package main

import (
	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/kernels/cuda"
)

// The FusedBatchNormGrad family: FusedBatchNormGrad, V2 and V3, training
// and inference (is_training). families_gen.go binds, validates and
// allocates its calls from opdef and dispatches them to these calls of its
// kernels.

// fusedBatchNormGradCPU runs the Go kernel with T: the per-channel tensors
// are float32 (T of FusedBatchNormGrad is float32 only).
func fusedBatchNormGradCPU[T kernels.Element](k *kernel, d kernels.Dims, in *fusedBatchNormGradIn, out *fusedBatchNormGradOut) {
	args := kernels.FusedGradArgs[T]{
		Dims:           d,
		YBackprop:      view[T](in.yBackprop),
		X:              view[T](in.x),
		Scale:          view[float32](in.scale),
		ReserveSpace1:  view[float32](in.reserveSpace1),
		ReserveSpace2:  view[float32](in.reserveSpace2),
		Epsilon:        k.epsilon,
		XBackprop:      view[T](out.xBackprop),
		ScaleBackprop:  view[float32](out.scaleBackprop),
		OffsetBackprop: view[float32](out.offsetBackprop),
	}
	if k.isTraining {
		kernels.TrainingGrad(args)
	} else {
		kernels.InferenceGrad(args)
	}
}

// fusedBatchNormGradGPU runs the CUDA kernel with T's type t.
func fusedBatchNormGradGPU(k *kernel, t cuda.DType, d kernels.Dims, in *fusedBatchNormGradIn, out *fusedBatchNormGradOut, dev gpuCall) error {
	return launch(cuda.FusedGradArgs{
		Dims: d, DType: t, Training: k.isTraining,
		YBackprop: ptr(in.yBackprop), X: ptr(in.x),
		Scale: ptr(in.scale), ReserveSpace1: ptr(in.reserveSpace1), ReserveSpace2: ptr(in.reserveSpace2),
		Epsilon:   k.epsilon,
		XBackprop: ptr(out.xBackprop), ScaleBackprop: ptr(out.scaleBackprop), OffsetBackprop: ptr(out.offsetBackprop),
	}, cuda.FusedGrad, dev)
}
