package main

import (
	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/kernels/cuda"
	"github.com/gobn/gobn/opdef"
)

// gpu runs the CUDA kernels of package kernels/cuda. TensorFlow hands a GPU
// kernel device memory (but for opdef.Op.HostMemory); the kernels run on
// TensorFlow's stream for the op where it can be found (stream.go), or on
// XLA's for an XLA call (xla.go).
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

// launch allocates the workspace the call needs and runs it on the call's
// stream (streamRule).
func launch[A interface{ WorkspaceBytes() int64 }](a A, run func(A, cuda.Placement) error, g gpuCall) error {
	var pl cuda.Placement
	if bytes := a.WorkspaceBytes(); bytes > 0 {
		ws, err := g.temp(bytes)
		if err != nil {
			return err
		}
		pl.Workspace, pl.WorkspaceBytes = cuda.Ptr(ws), bytes
	}
	return tfStream.run(g.stream, func(s cuda.Stream) error {
		pl.Stream, pl.CheckStream = s, s != 0
		return run(a, pl)
	})
}

// gpuCall is what a GPU kernel needs of its call beyond the tensors:
// scratch memory on the device, held until the call ends, and the stream
// the call runs on: TensorFlow's for the op (call.go), or XLA's (xla.go). A
// CPU kernel needs neither (nil).
type gpuCall interface {
	temp(bytes int64) (uintptr, error)
	stream() (cuda.Stream, error)
}

func (gpu) run(k *kernel, d kernels.Dims, in, out []tensor, count int64, g gpuCall) error {
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
		}, cuda.FusedGrad, g)
	case opdef.GlobalNormalizationGrad:
		return launch(cuda.GlobalNormalizationArgs{
			Dims: d, DType: t,
			T: ptr(in[0]), M: ptr(in[1]), V: ptr(in[2]), Gamma: ptr(in[3]), Backprop: ptr(in[4]),
			VarianceEpsilon:         k.epsilon,
			ScaleAfterNormalization: k.scaleAfterNormalization,
			DX:                      ptr(out[0]), DM: ptr(out[1]), DV: ptr(out[2]), DB: ptr(out[3]), DG: ptr(out[4]),
		}, cuda.GlobalNormalizationGrad, g)
	case opdef.GradReduce:
		return launch(cuda.GradReduceArgs{
			Dims: d, DType: t,
			YBackprop: ptr(in[0]), X: ptr(in[1]), Mean: ptr(in[2]),
			SumDy: ptr(out[0]), SumDyXmu: ptr(out[1]),
		}, cuda.GradReduce, g)
	case opdef.GradApply:
		return launch(cuda.GradApplyArgs{
			Dims: d, DType: t,
			YBackprop: ptr(in[0]), X: ptr(in[1]), Scale: ptr(in[2]), Mean: ptr(in[3]), Variance: ptr(in[4]),
			SumDy: ptr(in[5]), SumDyXmu: ptr(in[6]), Count: count, Epsilon: k.epsilon,
			XBackprop: ptr(out[0]),
		}, cuda.GradApply, g)
	}
	return internalError("capi: no CUDA kernel for " + k.op.Name)
}
