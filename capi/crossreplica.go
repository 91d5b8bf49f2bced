package main

import (
	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/opdef"
)

// gradReduce runs BatchNormGradReduce: the sums of one replica and its count,
// R = N·S, as an int64 scalar.
func (k *kernel) gradReduce(in []tensor, allocate allocator, dev gpuCall) error {
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
	return k.run(kernels.Dims{N: g.N, C: g.C, S: g.S, Layout: layout(g)}, in, out[:], 0, dev)
}

// gradApply runs BatchNormGradApply: x_backprop from the global sums.
func (k *kernel) gradApply(in []tensor, allocate allocator, dev gpuCall) error {
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
	var out [1]tensor
	if out[0], err = allocate(0, k.dtype, in[1].dims, dyOrX); err != nil {
		return err
	}
	return k.run(kernels.Dims{N: g.N, C: g.C, S: g.S, Layout: layout(g)}, in, out[:], count, dev)
}
