package main

import (
	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/kernels/cuda"
	"github.com/gobn/gobn/opdef"
)

// gpu runs the CUDA kernels of package kernels/cuda. TensorFlow hands a GPU
// kernel device memory (but for opdef.Op.HostMemory), and there is no C API
// for its stream: each call synchronizes the device's primary context, runs
// on gobn's own stream and waits for it (cuda.Placement with no Stream). An
// XLA call has XLA's stream (kernel.stream): it only enqueues on it.
type gpu struct{}

// gpuTypes are the CUDA element types of T; which an op has GPU kernels
// for is opdef's to say (Op.GPUKernels), and newKernel checks it.
var gpuTypes = map[opdef.DType]cuda.DType{opdef.Float: cuda.Float32, opdef.Half: cuda.Float16, opdef.BFloat16: cuda.BFloat16}

// ptr returns t's device address, or 0 for a tensor with no elements:
// TensorFlow gives an empty tensor on a GPU an address that is no device
// memory, so it must not tell the call's device (cuda's anchor skips 0).
func ptr(t tensor) cuda.Ptr {
	if t.bytes == 0 {
		return 0
	}
	return cuda.Ptr(uintptr(t.data))
}

// launch allocates the workspace the call needs and runs it, on stream
// when the caller has one (an XLA call's, xla.go).
func launch[A interface{ WorkspaceBytes() int64 }](a A, run func(A, cuda.Placement) error, stream uintptr, temp tempAllocator) error {
	pl := cuda.Placement{Stream: cuda.Stream(stream)}
	if bytes := a.WorkspaceBytes(); bytes > 0 {
		ws, err := temp(bytes)
		if err != nil {
			return err
		}
		pl.Workspace, pl.WorkspaceBytes = cuda.Ptr(ws), bytes
	}
	return run(a, pl)
}

func (gpu) run(k *kernel, d kernels.Dims, in, out []tensor, count int64, temp tempAllocator) error {
	t, ok := gpuTypes[k.dtype]
	if !ok {
		return internalError("capi: no CUDA type for T=" + k.dtype.String())
	}
	switch k.op.Kind {
	case opdef.FusedBatchNormGrad:
		return launch(cuda.FusedGradArgs{
			Dims: d, DType: t, Training: k.isTraining,
			YBackprop: ptr(in[0]), X: ptr(in[1]),
			Scale: ptr(in[2]), ReserveSpace1: ptr(in[3]), ReserveSpace2: ptr(in[4]),
			Epsilon:   k.epsilon,
			XBackprop: ptr(out[0]), ScaleBackprop: ptr(out[1]), OffsetBackprop: ptr(out[2]),
		}, cuda.FusedGrad, k.stream, temp)
	case opdef.GlobalNormalizationGrad:
		return launch(cuda.GlobalNormalizationArgs{
			Dims: d, DType: t,
			T: ptr(in[0]), M: ptr(in[1]), V: ptr(in[2]), Gamma: ptr(in[3]), Backprop: ptr(in[4]),
			VarianceEpsilon:         k.epsilon,
			ScaleAfterNormalization: k.scaleAfterNormalization,
			DX:                      ptr(out[0]), DM: ptr(out[1]), DV: ptr(out[2]), DB: ptr(out[3]), DG: ptr(out[4]),
		}, cuda.GlobalNormalizationGrad, k.stream, temp)
	case opdef.GradReduce:
		return launch(cuda.GradReduceArgs{
			Dims: d, DType: t,
			YBackprop: ptr(in[0]), X: ptr(in[1]), Mean: ptr(in[2]),
			SumDy: ptr(out[0]), SumDyXmu: ptr(out[1]),
		}, cuda.GradReduce, k.stream, temp)
	case opdef.GradApply:
		return launch(cuda.GradApplyArgs{
			Dims: d, DType: t,
			YBackprop: ptr(in[0]), X: ptr(in[1]), Scale: ptr(in[2]), Mean: ptr(in[3]), Variance: ptr(in[4]),
			SumDy: ptr(in[5]), SumDyXmu: ptr(in[6]), Count: count, Epsilon: k.epsilon,
			XBackprop: ptr(out[0]),
		}, cuda.GradApply, k.stream, temp)
	}
	return internalError("capi: no CUDA kernel for " + k.op.Name)
}
