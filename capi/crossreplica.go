package main

import (
	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/opdef"
)

// gradReduce runs BatchNormGradReduce: the sums of one replica and its count,
// R = N·S, as an int64 scalar.
func (k *kernel) gradReduce(in []tensor, allocate allocator, temp tempAllocator) error {
	g, err := opdef.CheckGradReduce(k.dataFormat, opdef.GradReduceInputs{
		YBackprop: in[0].dims, X: in[1].dims, Mean: in[2].dims,
	})
	if err != nil {
		return err
	}
	var out [3]tensor
	for i, spec := range []struct {
		dtype opdef.DType
		dims  []int64
	}{{opdef.Float, in[2].dims}, {opdef.Float, in[2].dims}, {opdef.Int64, scalarDims}} { // mean's dims: [C], as checked
		if out[i], err = allocate(i, spec.dtype, spec.dims, 0); err != nil {
			return err
		}
	}
	view[int64](out[2])[0] = g.N * g.S // count: host memory on every device
	d := kernels.Dims{N: g.N, C: g.C, S: g.S, Layout: layout(g)}
	if k.onGPU {
		return gpu{}.gradReduce(k, d, in, out[:], temp)
	}
	return cpu{}.gradReduce(k, d, in, out[:], temp)
}

func (cpu) gradReduce(k *kernel, d kernels.Dims, in, out []tensor, _ tempAllocator) error {
	switch k.dtype {
	case opdef.Float:
		gradReduce[float32](d, in, out)
	case opdef.Half:
		gradReduce[kernels.Half](d, in, out)
	case opdef.BFloat16:
		gradReduce[kernels.BFloat16](d, in, out)
	default:
		return unsupported(k)
	}
	return nil
}

func gradReduce[T kernels.Element](d kernels.Dims, in, out []tensor) {
	kernels.GradReduce(kernels.GradReduceArgs[T]{
		Dims:      d,
		YBackprop: view[T](in[0]),
		X:         view[T](in[1]),
		Mean:      view[float32](in[2]),
		SumDy:     view[float32](out[0]),
		SumDyXmu:  view[float32](out[1]),
	})
}

// gradApply runs BatchNormGradApply: x_backprop from the global sums.
func (k *kernel) gradApply(in []tensor, allocate allocator, temp tempAllocator) error {
	g, err := opdef.CheckGradApply(k.dataFormat, opdef.GradApplyInputs{
		YBackprop: in[0].dims, X: in[1].dims, Scale: in[2].dims, Mean: in[3].dims, Variance: in[4].dims,
		SumDy: in[5].dims, SumDyXmu: in[6].dims, Count: in[7].dims,
	})
	if err != nil {
		return err
	}
	count := view[int64](in[7])[0] // host memory on every device
	if err := opdef.CheckCount(count, g); err != nil {
		return err
	}
	out, err := allocate(0, k.dtype, in[1].dims, dyOrX)
	if err != nil {
		return err
	}
	d := kernels.Dims{N: g.N, C: g.C, S: g.S, Layout: layout(g)}
	if k.onGPU {
		return gpu{}.gradApply(k, count, d, in, out, temp)
	}
	return cpu{}.gradApply(k, count, d, in, out, temp)
}

func (cpu) gradApply(k *kernel, count int64, d kernels.Dims, in []tensor, out tensor, _ tempAllocator) error {
	switch k.dtype {
	case opdef.Float:
		gradApply[float32](k.epsilon, count, d, in, out)
	case opdef.Half:
		gradApply[kernels.Half](k.epsilon, count, d, in, out)
	case opdef.BFloat16:
		gradApply[kernels.BFloat16](k.epsilon, count, d, in, out)
	default:
		return unsupported(k)
	}
	return nil
}

func gradApply[T kernels.Element](epsilon float32, count int64, d kernels.Dims, in []tensor, out tensor) {
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
		Epsilon:   epsilon,
		XBackprop: view[T](out),
	})
}
