package kernels_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/internal/reference"
	"github.com/gobn/gobn/internal/tolerance"
	"github.com/gobn/gobn/kernels"
)

// runGradApply runs GradApply with a guarded output, checks the guards and
// that the inputs are unchanged, and returns x_backprop.
func runGradApply[T kernels.Element](t *testing.T, args kernels.GradApplyArgs[T]) []T {
	t.Helper()
	dx := newGuarded[T](len(args.X))
	args.XBackprop = dx.inner
	savedDy, savedX := append([]T(nil), args.YBackprop...), append([]T(nil), args.X...)
	var saved [][]float32
	for _, p := range [][]float32{args.Scale, args.Mean, args.Variance, args.SumDy, args.SumDyXmu} {
		saved = append(saved, append([]float32(nil), p...))
	}
	kernels.GradApply(args)
	dx.check(t, "x_backprop")
	requireUnchanged(t, "y_backprop", args.YBackprop, savedDy)
	requireUnchanged(t, "x", args.X, savedX)
	for i, p := range [][]float32{args.Scale, args.Mean, args.Variance, args.SumDy, args.SumDyXmu} {
		requireUnchanged(t, fmt.Sprintf("per-channel input %d", i), p, saved[i])
	}
	return dx.inner
}

// wantGradApply returns GradApply's float64 reference for in with the
// sums and count given, and the magnitude of its terms.
func wantGradApply[T kernels.Element](in fusedInputs[T], sumDy, sumDyXmu []float32, count int64) ([]float64, float64) {
	sums := reference.Sums{Dy: widenAll(sumDy), DyXmu: widenAll(sumDyXmu)}
	return reference.GradApply(sums, count, widenAll(in.scale), widenAll(in.mean), widenAll(in.variance), float64(in.epsilon)).
		Apply(shapeOf(in.dims), widenAll(in.dy), widenAll(in.x))
}

// testGradApply feeds GradApply global sums and counts that are not this
// tensor's own (as after an all-reduce): the formula holds for any of them.
func testGradApply[T kernels.Element](t *testing.T) {
	rng := rand.New(rand.NewPCG(8, uint64(len(typeName[T]()))))
	eachShapeLayout(t, func(t *testing.T, sc shapeCase, layout kernels.Layout) {
		in := newFusedInputs[T](rng, false, layout, sc)
		R := sc.N * sc.S
		count := int64(R + rng.IntN(3*R+2))
		if R == 0 {
			count = 0 // an empty tensor needs no count
		}
		sumDy := randomVector(rng, sc.C, -float64(count), float64(count))
		sumDyXmu := randomVector(rng, sc.C, -float64(count), float64(count))
		dx := runGradApply(t, kernels.GradApplyArgs[T]{
			Dims: in.dims, YBackprop: in.dy, X: in.x,
			Scale: in.scale, Mean: in.mean, Variance: in.variance,
			SumDy: sumDy, SumDyXmu: sumDyXmu, Count: count, Epsilon: in.epsilon,
		})
		want, magnitude := wantGradApply(in, sumDy, sumDyXmu, count)
		assertActivation(t, "x_backprop", dx, want, magnitude)
	})
}

func TestGradApply(t *testing.T) {
	eachElement(t, testGradApply[float32], testGradApply[float64], testGradApply[kernels.Half], testGradApply[kernels.BFloat16])
}

// testShardsEqualWholeBatch splits a batch along N into replicas, runs
// GradReduce on each, sums the sums and counts (the all-reduce), runs
// GradApply on each, and compares the concatenated x_backprop with the
// float64 training gradient of the whole batch and with TrainingGrad.
func testShardsEqualWholeBatch[T kernels.Element](t *testing.T) {
	rng := rand.New(rand.NewPCG(9, uint64(len(typeName[T]()))))
	for _, tc := range []struct {
		name   string
		shards []int // batch sizes of the replicas
		C, S   int
	}{
		{"two replicas", []int{2, 3}, 5, 7},
		{"one replica", []int{4}, 3, 9},
		{"an empty replica", []int{0, 3, 1}, 4, 6},
		{"one element per replica", []int{1, 1}, 3, 1},
		{"parallel", []int{3, 2}, 37, 1000},
	} {
		for _, l := range layouts {
			t.Run(fmt.Sprintf("%s/%s", tc.name, l.name), func(t *testing.T) {
				N := 0
				for _, n := range tc.shards {
					N += n
				}
				in := newFusedInputs[T](rng, true, l.layout, shapeCase{"", N, tc.C, tc.S})
				// Each replica's elements are a contiguous block in both layouts.
				perSample := tc.C * tc.S
				var count int64
				globalDy, globalDyXmu := make([]float64, tc.C), make([]float64, tc.C)
				for lo, i := 0, 0; i < len(tc.shards); lo, i = lo+tc.shards[i], i+1 {
					n := tc.shards[i]
					d := kernels.Dims{N: int64(n), C: int64(tc.C), S: int64(tc.S), Layout: l.layout}
					sumDy, sumDyXmu := runGradReduce(t, d, in.dy[lo*perSample:(lo+n)*perSample], in.x[lo*perSample:(lo+n)*perSample], in.mean)
					for c := range tc.C {
						globalDy[c] += float64(sumDy[c])
						globalDyXmu[c] += float64(sumDyXmu[c])
					}
					count += d.PerChannel()
				}
				require.Equal(t, int64(N*tc.S), count)
				sumDy, sumDyXmu := make([]float32, tc.C), make([]float32, tc.C)
				for c := range tc.C {
					sumDy[c], sumDyXmu[c] = float32(globalDy[c]), float32(globalDyXmu[c])
				}
				dx := make([]T, 0, len(in.x))
				for lo, i := 0, 0; i < len(tc.shards); lo, i = lo+tc.shards[i], i+1 {
					n := tc.shards[i]
					part := runGradApply(t, kernels.GradApplyArgs[T]{
						Dims:      kernels.Dims{N: int64(n), C: int64(tc.C), S: int64(tc.S), Layout: l.layout},
						YBackprop: in.dy[lo*perSample : (lo+n)*perSample], X: in.x[lo*perSample : (lo+n)*perSample],
						Scale: in.scale, Mean: in.mean, Variance: in.variance,
						SumDy: sumDy, SumDyXmu: sumDyXmu, Count: count, Epsilon: in.epsilon,
					})
					dx = append(dx, part...)
				}
				// Exact for the sums as rounded to float32 (U) ...
				wantApply, magnitude := wantGradApply(in, sumDy, sumDyXmu, count)
				assertActivation(t, "x_backprop", dx, wantApply, magnitude)
				// ... and, to float32 accuracy, the gradient of the whole batch.
				want := in.want(true)
				rel := tolerance.Bound{Atol: shardTolerance[T]()}
				reference.Close(t, "x_backprop against the whole batch", widenAll(dx), want.XBackprop, rel, want.XBackpropMagnitude)
				whole, _, _ := runFused(t, true, in)
				reference.Close(t, "x_backprop against TrainingGrad", widenAll(dx), widenAll(whole), rel, want.XBackpropMagnitude)
			})
		}
	}
}

// shardTolerance is the relative tolerance of a sharded x_backprop against
// the whole batch's: the all-reduced sums are float32 (U), so float32's 1e-5
// for float32 and float64, and one ulp of T (2⁻¹⁰, 2⁻⁷) for Half and BFloat16.
func shardTolerance[T kernels.Element]() float64 {
	var z T
	switch any(z).(type) {
	case kernels.Half:
		return 1.0 / 1024
	case kernels.BFloat16:
		return 1.0 / 128
	}
	return 1e-5
}

func TestShardsEqualWholeBatch(t *testing.T) {
	eachElement(t, testShardsEqualWholeBatch[float32], testShardsEqualWholeBatch[float64], testShardsEqualWholeBatch[kernels.Half], testShardsEqualWholeBatch[kernels.BFloat16])
}

// TestGradApplyEmptyNeedsNoCount: the arguments GradApply rules out are in
// TestArgsPanics; an empty tensor needs no count.
func TestGradApplyEmptyNeedsNoCount(t *testing.T) {
	vec := make([]float32, 3)
	require.NotPanics(t, func() {
		kernels.GradApply(kernels.GradApplyArgs[float32]{Dims: kernels.Dims{N: 0, C: 3, S: 4},
			Scale: vec, Mean: vec, Variance: vec, SumDy: vec, SumDyXmu: vec})
	})
}
