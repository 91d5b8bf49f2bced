package kernels_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gobn/gobn/kernels"
)

// The activation output of every kernel may be the same slice as one of its
// activation inputs (capi lets TensorFlow hand an output the buffer of an
// input nothing else references). The tests below run each kernel in place,
// over y_backprop and over x (t and backprop for the global op), on every
// shape case, and require every output to equal, bit for bit, what the kernel
// writes out of place, which the tests beside them check against the float64
// references; the outputs out of place come from runFused, runGlobal and
// runGradApply, which also check that the kernel left its inputs unchanged.

// writeOver replaces the input *in with a copy of it and makes the output
// *out that copy, which the kernel then overwrites.
func writeOver[T kernels.Element](in, out *[]T) {
	*in = append([]T(nil), *in...)
	*out = *in
}

func testFusedGradInPlace[T kernels.Element](t *testing.T, training bool) {
	rng := rand.New(rand.NewPCG(31, uint64(len(typeName[T]()))))
	for _, sc := range shapeCases {
		for _, l := range layouts {
			for _, over := range []string{"y_backprop", "x"} {
				t.Run(fmt.Sprintf("%s/%s/over %s", sc.name, l.name, over), func(t *testing.T) {
					in := newFusedInputs[T](rng, training, l.layout, sc)
					wantDx, wantScale, wantOffset := runFused(t, training, in)
					args := kernels.FusedGradArgs[T]{
						Dims: in.dims, YBackprop: in.dy, X: in.x,
						Scale: in.scale, ReserveSpace1: in.mean, ReserveSpace2: in.variance, Epsilon: in.epsilon,
						ScaleBackprop: make([]float32, sc.C), OffsetBackprop: make([]float32, sc.C),
					}
					if over == "x" {
						writeOver(&args.X, &args.XBackprop)
					} else {
						writeOver(&args.YBackprop, &args.XBackprop)
					}
					if training {
						kernels.TrainingGrad(args)
					} else {
						kernels.InferenceGrad(args)
					}
					requireUnchanged(t, "x_backprop in place", args.XBackprop, wantDx)
					requireUnchanged(t, "scale_backprop", args.ScaleBackprop, wantScale)
					requireUnchanged(t, "offset_backprop", args.OffsetBackprop, wantOffset)
				})
			}
		}
	}
}

func TestTrainingGradInPlace(t *testing.T) {
	t.Run("float32", func(t *testing.T) { testFusedGradInPlace[float32](t, true) })
	t.Run("Half", func(t *testing.T) { testFusedGradInPlace[kernels.Half](t, true) })
	t.Run("BFloat16", func(t *testing.T) { testFusedGradInPlace[kernels.BFloat16](t, true) })
}

func TestInferenceGradInPlace(t *testing.T) {
	t.Run("float32", func(t *testing.T) { testFusedGradInPlace[float32](t, false) })
	t.Run("Half", func(t *testing.T) { testFusedGradInPlace[kernels.Half](t, false) })
	t.Run("BFloat16", func(t *testing.T) { testFusedGradInPlace[kernels.BFloat16](t, false) })
}

func testGlobalGradInPlace[T kernels.Element](t *testing.T) {
	rng := rand.New(rand.NewPCG(37, uint64(len(typeName[T]()))))
	for _, sc := range shapeCases {
		for _, over := range []string{"t", "backprop"} {
			t.Run(fmt.Sprintf("%s/over %s", sc.name, over), func(t *testing.T) {
				in := newGlobalInputs[T](rng, sc)
				want := runGlobal(t, in, true)
				C := sc.C
				args := kernels.GlobalNormalizationArgs[T]{
					Dims: in.dims, T: in.t, Backprop: in.backprop, M: in.m, V: in.v, Gamma: in.gamma,
					VarianceEpsilon: in.epsilon, ScaleAfterNormalization: true,
					DM: make([]T, C), DV: make([]T, C), DB: make([]T, C), DG: make([]T, C),
				}
				if over == "t" {
					writeOver(&args.T, &args.DX)
				} else {
					writeOver(&args.Backprop, &args.DX)
				}
				kernels.GlobalNormalizationGrad(args)
				requireUnchanged(t, "dx in place", args.DX, want.dx)
				requireUnchanged(t, "dm", args.DM, want.dm)
				requireUnchanged(t, "dv", args.DV, want.dv)
				requireUnchanged(t, "db", args.DB, want.db)
				requireUnchanged(t, "dg", args.DG, want.dg)
			})
		}
	}
}

func TestGlobalNormalizationGradInPlace(t *testing.T) {
	t.Run("float32", testGlobalGradInPlace[float32])
	t.Run("float64", testGlobalGradInPlace[float64])
	t.Run("Half", testGlobalGradInPlace[kernels.Half])
}

func testGradApplyInPlace[T kernels.Element](t *testing.T) {
	rng := rand.New(rand.NewPCG(41, uint64(len(typeName[T]()))))
	for _, sc := range shapeCases {
		if sc.N*sc.S == 0 {
			continue // GradApply writes nothing, and wants no count
		}
		for _, l := range layouts {
			for _, over := range []string{"y_backprop", "x"} {
				t.Run(fmt.Sprintf("%s/%s/over %s", sc.name, l.name, over), func(t *testing.T) {
					in := newFusedInputs[T](rng, true, l.layout, sc)
					args := kernels.GradApplyArgs[T]{
						Dims: in.dims, YBackprop: in.dy, X: in.x, Scale: in.scale, Mean: in.mean, Variance: in.variance,
						SumDy: randomVector(rng, sc.C, -10, 10), SumDyXmu: randomVector(rng, sc.C, -10, 10),
						Count: int64(sc.N * sc.S), Epsilon: in.epsilon,
					}
					want := runGradApply(t, args)
					if over == "x" {
						writeOver(&args.X, &args.XBackprop)
					} else {
						writeOver(&args.YBackprop, &args.XBackprop)
					}
					kernels.GradApply(args)
					requireUnchanged(t, "x_backprop in place", args.XBackprop, want)
				})
			}
		}
	}
}

func TestGradApplyInPlace(t *testing.T) {
	t.Run("float32", testGradApplyInPlace[float32])
	t.Run("Half", testGradApplyInPlace[kernels.Half])
	t.Run("BFloat16", testGradApplyInPlace[kernels.BFloat16])
}
