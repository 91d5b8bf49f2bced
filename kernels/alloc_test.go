package kernels_test

import (
	"fmt"
	"testing"

	"github.com/gobn/gobn/kernels"
)

// TestSmallCallsAllocateNothing requires every kernel, on a tensor small
// enough to run on the calling goroutine alone, to allocate nothing on Go's
// heap once its pooled scratch exists: inside TensorFlow each allocation
// brought Go's collector and its sweeper out every few hundred calls of a
// small op. C = 3 runs over a channel period, C = 64 and 100 over C itself.
func TestSmallCallsAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items on purpose under -race")
	}
	for _, C := range []int64{3, 64, 100} {
		for _, l := range layouts {
			d := kernels.Dims{N: 2, C: C, S: 49, Layout: l.layout}
			t.Run(fmt.Sprintf("%s/C=%d", l.name, C), func(t *testing.T) {
				f32, half, bf16 := fusedArgs[float32](d), fusedArgs[kernels.Half](d), fusedArgs[kernels.BFloat16](d)
				reduce, apply := reduceArgs(d), applyArgs(d)
				checkNoAllocs(t, "TrainingGrad/float32", func() { kernels.TrainingGrad(f32) })
				checkNoAllocs(t, "TrainingGrad/Half", func() { kernels.TrainingGrad(half) })
				checkNoAllocs(t, "TrainingGrad/BFloat16", func() { kernels.TrainingGrad(bf16) })
				checkNoAllocs(t, "InferenceGrad/float32", func() { kernels.InferenceGrad(f32) })
				checkNoAllocs(t, "GradReduce", func() { kernels.GradReduce(reduce) })
				checkNoAllocs(t, "GradApply", func() { kernels.GradApply(apply) })
				for _, mode := range []string{"Identity", "Relu6"} {
					for _, training := range []bool{true, false} {
						ex32, exHalf := exArgs(f32, mode, training), exArgs(half, mode, training)
						name := fmt.Sprintf("FusedBatchNormGradEx/%s/training=%v", mode, training)
						checkNoAllocs(t, name+"/float32", func() { kernels.FusedBatchNormGradEx(ex32) })
						checkNoAllocs(t, name+"/Half", func() { kernels.FusedBatchNormGradEx(exHalf) })
					}
				}
				if l.layout == kernels.ChannelsLast {
					g32, g64 := globalArgs[float32](d), globalArgs[float64](d)
					checkNoAllocs(t, "GlobalNormalizationGrad/float32", func() { kernels.GlobalNormalizationGrad(g32) })
					checkNoAllocs(t, "GlobalNormalizationGrad/float64", func() { kernels.GlobalNormalizationGrad(g64) })
				}
			})
		}
	}
}

// checkNoAllocs runs f once to fill the pools, then requires it to allocate
// nothing on average over 50 runs (a collection that empties the pools in
// between costs one run a few allocations, below one a run on average).
func checkNoAllocs(t *testing.T, name string, f func()) {
	t.Helper()
	f()
	if n := testing.AllocsPerRun(50, f); n != 0 {
		t.Errorf("%s: %v allocations a call, want 0", name, n)
	}
}

// Valid arguments of each kernel for d (TestArgsPanics breaks them one at a
// time); the test above makes them once per case, outside the runs counted.

func fusedArgs[T kernels.Element](d kernels.Dims) kernels.FusedGradArgs[T] {
	n, C := d.Len(), int(d.C)
	dy, x := make([]T, n), make([]T, n)
	for i := range n {
		dy[i], x[i] = fromF64[T](float64(i%7)-3), fromF64[T](float64(i%5))
	}
	return kernels.FusedGradArgs[T]{
		Dims: d, YBackprop: dy, X: x,
		Scale: ones(C), ReserveSpace1: ones(C), ReserveSpace2: ones(C), Epsilon: 1e-3,
		XBackprop: make([]T, n), ScaleBackprop: make([]float32, C), OffsetBackprop: make([]float32, C),
	}
}

func reduceArgs(d kernels.Dims) kernels.GradReduceArgs[float32] {
	f := fusedArgs[float32](d)
	return kernels.GradReduceArgs[float32]{Dims: d, YBackprop: f.YBackprop, X: f.X, Mean: f.ReserveSpace1,
		SumDy: f.ScaleBackprop, SumDyXmu: f.OffsetBackprop}
}

func applyArgs(d kernels.Dims) kernels.GradApplyArgs[float32] {
	f := fusedArgs[float32](d)
	return kernels.GradApplyArgs[float32]{Dims: d, YBackprop: f.YBackprop, X: f.X, Scale: f.Scale,
		Mean: f.ReserveSpace1, Variance: f.ReserveSpace2, SumDy: ones(int(d.C)), SumDyXmu: ones(int(d.C)),
		Count: d.PerChannel(), Epsilon: 1e-3, XBackprop: f.XBackprop}
}

func globalArgs[T kernels.Element](d kernels.Dims) kernels.GlobalNormalizationArgs[T] {
	n, C := d.Len(), int(d.C)
	f := fusedArgs[T](d)
	perChannel := func() []T {
		p := make([]T, C)
		for i := range p {
			p[i] = fromF64[T](1)
		}
		return p
	}
	return kernels.GlobalNormalizationArgs[T]{Dims: d, T: f.X, Backprop: f.YBackprop,
		M: perChannel(), V: perChannel(), Gamma: perChannel(), VarianceEpsilon: 1e-3, ScaleAfterNormalization: true,
		DX: make([]T, n), DM: perChannel(), DV: perChannel(), DB: perChannel(), DG: perChannel()}
}

func ones(n int) []float32 {
	p := make([]float32, n)
	for i := range p {
		p[i] = 1
	}
	return p
}

// exArgs are FusedBatchNormGradEx's args of f's tensors, y x itself, with
// side_input_backprop.
func exArgs[T kernels.Element](f kernels.FusedGradArgs[T], mode string, training bool) kernels.FusedGradExArgs[T] {
	return kernels.FusedGradExArgs[T]{Dims: f.Dims, YBackprop: f.YBackprop, X: f.X, Y: f.X, Scale: f.Scale,
		ReserveSpace1: f.ReserveSpace1, ReserveSpace2: f.ReserveSpace2, Offset: f.Scale, Epsilon: f.Epsilon,
		ActivationMode: mode, NumSideInputs: 1, IsTraining: training, XBackprop: f.XBackprop,
		ScaleBackprop: f.ScaleBackprop, OffsetBackprop: f.OffsetBackprop, SideInputBackprop: make([]T, len(f.X))}
}
