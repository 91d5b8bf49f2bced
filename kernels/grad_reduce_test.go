package kernels_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gobn/gobn/internal/reference"
	"github.com/gobn/gobn/internal/tolerance"
	"github.com/gobn/gobn/kernels"
)

// runGradReduce runs GradReduce with guarded outputs, checks the guards and
// that the inputs are unchanged, and returns the sums.
func runGradReduce[T kernels.Element](t *testing.T, d kernels.Dims, dy, x []T, mean []float32) (sumDy, sumDyXmu []float32) {
	t.Helper()
	C := int(d.C)
	a, b := newGuarded[float32](C), newGuarded[float32](C)
	savedDy, savedX, savedMean := append([]T(nil), dy...), append([]T(nil), x...), append([]float32(nil), mean...)
	kernels.GradReduce(kernels.GradReduceArgs[T]{Dims: d, YBackprop: dy, X: x, Mean: mean, SumDy: a.inner, SumDyXmu: b.inner})
	a.check(t, "sum_dy")
	b.check(t, "sum_dy_xmu")
	requireUnchanged(t, "y_backprop", dy, savedDy)
	requireUnchanged(t, "x", x, savedX)
	requireUnchanged(t, "mean", mean, savedMean)
	return a.inner, b.inner
}

func testGradReduce[T kernels.Element](t *testing.T) {
	rng := rand.New(rand.NewPCG(7, uint64(len(typeName[T]()))))
	eachShapeLayout(t, func(t *testing.T, sc shapeCase, layout kernels.Layout) {
		in := newFusedInputs[T](rng, true, layout, sc)
		sumDy, sumDyXmu := runGradReduce(t, in.dims, in.dy, in.x, in.mean)
		want := reference.GradReduce(shapeOf(in.dims), widenAll(in.dy), widenAll(in.x), widenAll(in.mean))
		reference.Close(t, "sum_dy", widenAll(sumDy), want.Dy, tolerance.Bound{Atol: 1e-6}, 0)
		reference.Close(t, "sum_dy_xmu", widenAll(sumDyXmu), want.DyXmu, tolerance.Bound{Atol: 1e-6}, 0)
		if sc.N*sc.S == 0 {
			for c := range sc.C {
				assert.Zero(t, sumDy[c], "sum_dy[%d] of an empty batch", c)
				assert.Zero(t, sumDyXmu[c], "sum_dy_xmu[%d] of an empty batch", c)
			}
		}
	})
}

func TestGradReduce(t *testing.T) {
	eachElement(t, testGradReduce[float32], testGradReduce[float64], testGradReduce[kernels.Half], testGradReduce[kernels.BFloat16])
}
