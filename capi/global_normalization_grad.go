package main

import (
	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/kernels/cuda"
)

// The GlobalNormalizationGrad family: BatchNormWithGlobalNormalizationGrad,
// channels last, every tensor of T (gobn's rules beside stock's: t and
// backprop of one shape, m, v and gamma sized C). families_gen.go binds,
// validates and allocates its calls from opdef and dispatches them to these
// calls of its kernels.

// globalNormalizationGradCPU runs the Go kernel with T.
func globalNormalizationGradCPU[T kernels.Element](k *kernel, d kernels.Dims, in *globalNormalizationGradIn, out *globalNormalizationGradOut) {
	kernels.GlobalNormalizationGrad(kernels.GlobalNormalizationArgs[T]{
		Dims:                    d,
		T:                       view[T](in.t),
		M:                       view[T](in.m),
		V:                       view[T](in.v),
		Gamma:                   view[T](in.gamma),
		Backprop:                view[T](in.backprop),
		VarianceEpsilon:         k.epsilon,
		ScaleAfterNormalization: k.scaleAfterNormalization,
		DX:                      view[T](out.dx),
		DM:                      view[T](out.dm),
		DV:                      view[T](out.dv),
		DB:                      view[T](out.db),
		DG:                      view[T](out.dg),
	})
}

// globalNormalizationGradGPU runs the CUDA kernel with T's type t.
func globalNormalizationGradGPU(k *kernel, t cuda.DType, d kernels.Dims, in *globalNormalizationGradIn, out *globalNormalizationGradOut, dev gpuCall) error {
	return launch(cuda.GlobalNormalizationArgs{
		Dims: d, DType: t,
		T: ptr(in.t), M: ptr(in.m), V: ptr(in.v), Gamma: ptr(in.gamma), Backprop: ptr(in.backprop),
		VarianceEpsilon:         k.epsilon,
		ScaleAfterNormalization: k.scaleAfterNormalization,
		DX:                      ptr(out.dx), DM: ptr(out.dm), DV: ptr(out.dv), DB: ptr(out.db), DG: ptr(out.dg),
	}, cuda.GlobalNormalizationGrad, dev)
}
