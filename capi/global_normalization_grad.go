package main

import (
	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/kernels/cuda"
)

// The GlobalNormalizationGrad family: BatchNormWithGlobalNormalizationGrad,
// channels last, every tensor of T (gobn's rules beside stock's: t and
// backprop of one shape, m, v and gamma sized C). families_gen.go binds,
// validates and allocates its calls from opdef, sets their tensors in the
// kernels' args these calls take (gencapi reads the args' types here) and
// dispatches them to these calls, which set the attrs.

// globalNormalizationGradCPU runs the Go kernel.
func globalNormalizationGradCPU[T kernels.Element](k *kernel, a kernels.GlobalNormalizationArgs[T]) {
	a.VarianceEpsilon, a.ScaleAfterNormalization = k.epsilon, k.scaleAfterNormalization
	kernels.GlobalNormalizationGrad(a)
}

// globalNormalizationGradGPU runs the CUDA kernel.
func globalNormalizationGradGPU(k *kernel, a cuda.GlobalNormalizationArgs, dev gpuCall) error {
	a.VarianceEpsilon, a.ScaleAfterNormalization = k.epsilon, k.scaleAfterNormalization
	return launch(a, cuda.GlobalNormalizationGrad, dev)
}
