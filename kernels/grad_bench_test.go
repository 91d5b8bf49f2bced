package kernels_test

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/gobn/gobn/kernels"
)

// benchShapes are an early ResNet activation (N=8, H=W=56, C=64: 1.6M
// elements, parallel) and a small late one (N=1, H=W=7, C=64: 3136 elements,
// on the calling thread).
var benchShapes = []struct {
	name    string
	N, C, S int64
}{
	{"N=8,H=W=56,C=64", 8, 64, 56 * 56},
	{"N=8,H=W=28,C=512", 8, 512, 28 * 28},
	{"N=8,H=W=112,C=64", 8, 64, 112 * 112},
	{"N=8,H=W=14,C=1024", 8, 1024, 14 * 14},
	{"N=8,H=W=56,C=256", 8, 256, 56 * 56},
	{"N=8,H=W=28,C=128", 8, 128, 28 * 28},
	{"N=1,H=W=7,C=64", 1, 64, 7 * 7},
}

// benchFusedGrad times TrainingGrad, or InferenceGrad. b.SetBytes counts the minimum
// traffic: read x and dy, write dx, three elements of T per element (12 bytes
// for float32, 6 for Half).
func benchFusedGrad[T kernels.Element](b *testing.B, training bool, layout kernels.Layout, N, C, S int64) {
	d := kernels.Dims{N: N, C: C, S: S, Layout: layout}
	n := d.Len()
	rng := rand.New(rand.NewPCG(1, 2))
	dy, x, dx := make([]T, n), make([]T, n), make([]T, n)
	for i := range x {
		dy[i] = fromF64[T](rng.NormFloat64())
		x[i] = fromF64[T](1 + rng.NormFloat64())
	}
	scale, mean, variance := make([]float32, C), make([]float32, C), make([]float32, C)
	for c := range C {
		scale[c], mean[c], variance[c] = 1, 1, 1
	}
	scaleBackprop, offsetBackprop := make([]float32, C), make([]float32, C)
	args := kernels.FusedGradArgs[T]{
		Dims: d, YBackprop: dy, X: x,
		Scale: scale, ReserveSpace1: mean, ReserveSpace2: variance, Epsilon: 1e-3,
		XBackprop: dx, ScaleBackprop: scaleBackprop, OffsetBackprop: offsetBackprop,
	}
	var z T
	b.SetBytes(3 * int64(n) * int64(unsafe.Sizeof(z)))
	b.ReportAllocs()
	grad := kernels.InferenceGrad[T]
	if training {
		grad = kernels.TrainingGrad[T]
	}
	for b.Loop() {
		grad(args)
	}
}

func BenchmarkTrainingGrad(b *testing.B) {
	for _, s := range benchShapes {
		for _, l := range layouts {
			b.Run("float32/"+l.name+"/"+s.name, func(b *testing.B) {
				benchFusedGrad[float32](b, true, l.layout, s.N, s.C, s.S)
			})
			b.Run("Half/"+l.name+"/"+s.name, func(b *testing.B) {
				benchFusedGrad[kernels.Half](b, true, l.layout, s.N, s.C, s.S)
			})
			b.Run("BFloat16/"+l.name+"/"+s.name, func(b *testing.B) {
				benchFusedGrad[kernels.BFloat16](b, true, l.layout, s.N, s.C, s.S)
			})
		}
	}
}

func BenchmarkInferenceGrad(b *testing.B) {
	for _, s := range benchShapes {
		for _, l := range layouts {
			b.Run("float32/"+l.name+"/"+s.name, func(b *testing.B) {
				benchFusedGrad[float32](b, false, l.layout, s.N, s.C, s.S)
			})
		}
	}
}
