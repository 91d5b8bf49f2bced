package main

import (
	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/opdef"
)

// cpu runs the Go kernels of package kernels. The dtype of T picks the
// instantiation once, for every op (runCPU); which dtypes an op has CPU
// kernels for is opdef's to say (Op.Kernels), and newKernel checks it
// when TensorFlow makes the kernel. The calls are direct, not through an
// interface or a func value, so that the tensors' arrays stay on the stack:
// a CPU call allocates nothing.
type cpu struct{}

func (cpu) run(k *kernel, d kernels.Dims, in, out []tensor, count int64) error {
	switch k.dtype {
	case opdef.Float:
		runCPU[float32](k, d, in, out, count)
	case opdef.Double:
		runCPU[float64](k, d, in, out, count)
	case opdef.Half:
		runCPU[kernels.Half](k, d, in, out, count)
	case opdef.BFloat16:
		runCPU[kernels.BFloat16](k, d, in, out, count)
	default:
		return internalError("capi: no Go kernel for T=" + k.dtype.String())
	}
	return nil
}

// runCPU runs k's op with T: the per-channel tensors are float32 (U, or
// scale of V2 and V3) but for FusedBatchNormGrad and
// BatchNormWithGlobalNormalizationGrad, whose are T.
func runCPU[T kernels.Element](k *kernel, d kernels.Dims, in, out []tensor, count int64) {
	switch k.op.Kind {
	case opdef.FusedBatchNormGrad:
		args := kernels.FusedGradArgs[T]{
			Dims:           d,
			YBackprop:      view[T](in[0]),
			X:              view[T](in[1]),
			Scale:          view[float32](in[2]),
			ReserveSpace1:  view[float32](in[3]),
			ReserveSpace2:  view[float32](in[4]),
			Epsilon:        k.epsilon,
			XBackprop:      view[T](out[0]),
			ScaleBackprop:  view[float32](out[1]),
			OffsetBackprop: view[float32](out[2]),
		}
		if k.isTraining {
			kernels.TrainingGrad(args)
		} else {
			kernels.InferenceGrad(args)
		}
	case opdef.GlobalNormalizationGrad:
		kernels.GlobalNormalizationGrad(kernels.GlobalNormalizationArgs[T]{
			Dims:                    d,
			T:                       view[T](in[0]),
			M:                       view[T](in[1]),
			V:                       view[T](in[2]),
			Gamma:                   view[T](in[3]),
			Backprop:                view[T](in[4]),
			VarianceEpsilon:         k.epsilon,
			ScaleAfterNormalization: k.scaleAfterNormalization,
			DX:                      view[T](out[0]),
			DM:                      view[T](out[1]),
			DV:                      view[T](out[2]),
			DB:                      view[T](out[3]),
			DG:                      view[T](out[4]),
		})
	case opdef.GradReduce:
		kernels.GradReduce(kernels.GradReduceArgs[T]{
			Dims:      d,
			YBackprop: view[T](in[0]),
			X:         view[T](in[1]),
			Mean:      view[float32](in[2]),
			SumDy:     view[float32](out[0]),
			SumDyXmu:  view[float32](out[1]),
		})
	case opdef.GradApply:
		kernels.GradApply(kernels.GradApplyArgs[T]{
			Dims:      d,
			YBackprop: view[T](in[0]),
			X:         view[T](in[1]),
			Scale:     view[float32](in[2]),
			Mean:      view[float32](in[3]),
			Variance:  view[float32](in[4]),
			SumDy:     view[float32](in[5]),
			SumDyXmu:  view[float32](in[6]),
			Count:     count,
			Epsilon:   k.epsilon,
			XBackprop: view[T](out[0]),
		})
	}
}
