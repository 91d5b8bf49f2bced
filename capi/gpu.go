package main

import (
	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/kernels/cuda"
	"github.com/gobn/gobn/opdef"
)

// gpu runs the CUDA kernels of package kernels/cuda. TensorFlow hands a GPU
// kernel device memory (but for opdef.Op.HostMemory), and there is no C API
// for its stream: each call synchronizes the device's primary context, runs
// on gobn's own stream and waits for it (cuda.Placement with no Stream).
type gpu struct{}

// gpuType returns the CUDA element type of T.
func gpuType(k *kernel) (cuda.DType, error) {
	switch k.dtype {
	case opdef.Float:
		return cuda.Float32, nil
	case opdef.Half:
		return cuda.Float16, nil
	case opdef.BFloat16:
		return cuda.BFloat16, nil
	}
	return 0, unsupported(k)
}

// ptr returns t's device address.
func ptr(t tensor) cuda.Ptr { return cuda.Ptr(uintptr(t.data)) }

// placement allocates the workspace the call needs.
func placement(bytes int64, temp tempAllocator) (cuda.Placement, error) {
	if bytes == 0 {
		return cuda.Placement{}, nil
	}
	ws, err := temp(bytes)
	if err != nil {
		return cuda.Placement{}, err
	}
	return cuda.Placement{Workspace: cuda.Ptr(ws), WorkspaceBytes: bytes}, nil
}

func (gpu) fusedGrad(k *kernel, d kernels.Dims, in, out []tensor, temp tempAllocator) error {
	t, err := gpuType(k)
	if err != nil {
		return err
	}
	a := cuda.FusedGradArgs{
		Dims: d, DType: t, Training: k.isTraining,
		YBackprop: ptr(in[0]), X: ptr(in[1]),
		Scale: ptr(in[2]), ReserveSpace1: ptr(in[3]), ReserveSpace2: ptr(in[4]),
		Epsilon:   k.epsilon,
		XBackprop: ptr(out[0]), ScaleBackprop: ptr(out[1]), OffsetBackprop: ptr(out[2]),
	}
	pl, err := placement(a.WorkspaceBytes(), temp)
	if err != nil {
		return err
	}
	return cuda.FusedGrad(a, pl)
}

func (gpu) globalNormalizationGrad(k *kernel, d kernels.Dims, in, out []tensor, temp tempAllocator) error {
	t, err := gpuType(k)
	if err != nil || t == cuda.BFloat16 {
		return unsupported(k)
	}
	a := cuda.GlobalNormalizationArgs{
		Dims: d, DType: t,
		T: ptr(in[0]), M: ptr(in[1]), V: ptr(in[2]), Gamma: ptr(in[3]), Backprop: ptr(in[4]),
		VarianceEpsilon:         k.epsilon,
		ScaleAfterNormalization: k.scaleAfterNormalization,
		DX:                      ptr(out[0]), DM: ptr(out[1]), DV: ptr(out[2]), DB: ptr(out[3]), DG: ptr(out[4]),
	}
	pl, err := placement(a.WorkspaceBytes(), temp)
	if err != nil {
		return err
	}
	return cuda.GlobalNormalizationGrad(a, pl)
}

func (gpu) gradReduce(k *kernel, d kernels.Dims, in, out []tensor, temp tempAllocator) error {
	t, err := gpuType(k)
	if err != nil {
		return err
	}
	a := cuda.GradReduceArgs{
		Dims: d, DType: t,
		YBackprop: ptr(in[0]), X: ptr(in[1]), Mean: ptr(in[2]),
		SumDy: ptr(out[0]), SumDyXmu: ptr(out[1]),
	}
	pl, err := placement(a.WorkspaceBytes(), temp)
	if err != nil {
		return err
	}
	return cuda.GradReduce(a, pl)
}

func (gpu) gradApply(k *kernel, count int64, d kernels.Dims, in []tensor, out tensor, temp tempAllocator) error {
	t, err := gpuType(k)
	if err != nil {
		return err
	}
	a := cuda.GradApplyArgs{
		Dims: d, DType: t,
		YBackprop: ptr(in[0]), X: ptr(in[1]), Scale: ptr(in[2]), Mean: ptr(in[3]), Variance: ptr(in[4]),
		SumDy: ptr(in[5]), SumDyXmu: ptr(in[6]), Count: count, Epsilon: k.epsilon,
		XBackprop: ptr(out),
	}
	pl, err := placement(a.WorkspaceBytes(), temp)
	if err != nil {
		return err
	}
	return cuda.GradApply(a, pl)
}
