package ops_test

import (
	"math"
	"testing"

	tf "github.com/galeone/tensorflow/tensorflow/go"

	"github.com/gobn/gobn/internal/tolerance"
)

// geometry is an activation tensor seen as N × C × S (S the product of the
// spatial dimensions), with the channel axis last or at axis 1.
type geometry struct {
	N, C, S      int64
	channelsLast bool
}

// channel returns the channel of the element at flat index i.
func (g geometry) channel(i int) int {
	if g.channelsLast {
		return i % int(g.C)
	}
	return (i / int(g.S)) % int(g.C)
}

// sums returns, per channel, Σ dy and Σ dy·(x−mean).
func (g geometry) sums(dy, x, mean []float64) (sumDy, sumDyXc []float64) {
	sumDy, sumDyXc = make([]float64, g.C), make([]float64, g.C)
	for i := range dy {
		c := g.channel(i)
		sumDy[c] += dy[i]
		sumDyXc[c] += dy[i] * (x[i] - mean[c])
	}
	return sumDy, sumDyXc
}

// fusedReference is FusedBatchNormGrad in float64: x_backprop,
// scale_backprop, offset_backprop. With c = 1/sqrt(variance+ε), R = N·S:
//
//	offset_backprop = Σ dy, scale_backprop = c·Σ dy·(x−μ)
//	training:  x_backprop = scale·c·(dy − Σdy/R − (x−μ)·c²·Σ dy·(x−μ)/R)
//	inference: x_backprop = dy·scale·c
func fusedReference(g geometry, dy, x, scale, mean, variance []float64, eps float32, training bool) [3][]float64 {
	sumDy, sumDyXc := g.sums(dy, x, mean)
	R := float64(g.N * g.S)
	inv := make([]float64, g.C)
	scaleBackprop := make([]float64, g.C)
	for c := range inv {
		inv[c] = 1 / math.Sqrt(variance[c]+float64(eps))
		scaleBackprop[c] = sumDyXc[c] * inv[c]
	}
	xBackprop := make([]float64, len(x))
	for i := range x {
		c := g.channel(i)
		if training {
			xBackprop[i] = scale[c] * inv[c] * (dy[i] - sumDy[c]/R - (x[i]-mean[c])*inv[c]*inv[c]*sumDyXc[c]/R)
		} else {
			xBackprop[i] = dy[i] * scale[c] * inv[c]
		}
	}
	return [3][]float64{xBackprop, scaleBackprop, sumDy}
}

// globalNormalizationReference is BatchNormWithGlobalNormalizationGrad in
// float64: dx, dm, dv, db, dg. With s = 1/sqrt(v+ε) and γ' = γ (1 without
// scale_after_normalization): db = Σ dy, dx = dy·s·γ', dm = −db·s·γ',
// dg = s·Σ dy·(t−m) (0 without scaling), dv = −½·s³·γ'·Σ dy·(t−m).
func globalNormalizationReference(g geometry, t, m, v, gamma, dy []float64, eps float32, scaleAfter bool) [5][]float64 {
	db, sumDyXc := g.sums(dy, t, m)
	dm, dv, dg := make([]float64, g.C), make([]float64, g.C), make([]float64, g.C)
	k := make([]float64, g.C)
	for c := range k {
		s := 1 / math.Sqrt(v[c]+float64(eps))
		k[c] = s
		if scaleAfter {
			k[c] *= gamma[c]
			dg[c] = s * sumDyXc[c]
		}
		dm[c] = -db[c] * k[c]
		dv[c] = -0.5 * s * s * k[c] * sumDyXc[c]
	}
	dx := make([]float64, len(t))
	for i := range dx {
		dx[i] = dy[i] * k[g.channel(i)]
	}
	return [5][]float64{dx, dm, dv, db, dg}
}

// dtypeNames are the names internal/tolerance keys its bounds by.
var dtypeNames = map[tf.DataType]string{tf.Float: "float", tf.Half: "half", tf.Bfloat16: "bfloat16", tf.Double: "double"}

// bounds returns atol·max|want| + rtol·|want| element-wise.
func bounds(want []float64, dtype tf.DataType) []float64 {
	tol := tolerance.ByDType[dtypeNames[dtype]]
	scale := 0.0
	for _, w := range want {
		if !math.IsNaN(w) && !math.IsInf(w, 0) {
			scale = math.Max(scale, math.Abs(w))
		}
	}
	b := make([]float64, len(want))
	for i, w := range want {
		b[i] = tol.Atol*scale + tol.Rtol*math.Abs(w)
	}
	return b
}

// requireClose fails unless got matches want within dtype's tolerance, NaN
// only where want has NaN.
func requireClose(t *testing.T, got, want []float64, dtype tf.DataType, what string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d elements, want %d", what, len(got), len(want))
	}
	bound := bounds(want, dtype)
	for i := range got {
		if math.IsNaN(got[i]) && math.IsNaN(want[i]) {
			continue
		}
		if !(math.Abs(got[i]-want[i]) <= bound[i]) {
			t.Fatalf("%s (%s tolerance): element %d: got %g, want %g, |err| %.3g > bound %.3g; max |err| %.3g",
				what, dtypeName[dtype], i, got[i], want[i], math.Abs(got[i]-want[i]), bound[i], maxAbsDiff(got, want))
		}
	}
}

// requireAsAccurate fails unless got is, element-wise, no further from the
// float64 reference than stock is, plus one tolerance of slack:
// |got − ref| ≤ |stock − ref| + atol·max|ref| + rtol·|ref|.
func requireAsAccurate(t *testing.T, got, stock, ref []float64, dtype tf.DataType, what string) {
	t.Helper()
	bound := bounds(ref, dtype)
	for i := range got {
		gotErr, stockErr := math.Abs(got[i]-ref[i]), math.Abs(stock[i]-ref[i])
		if !(gotErr <= stockErr+bound[i]) {
			t.Fatalf("%s: less accurate than stock at element %d: gobn %g, stock %g, reference %g",
				what, i, got[i], stock[i], ref[i])
		}
	}
}

func maxAbsDiff(a, b []float64) float64 {
	m := 0.0
	for i := range a {
		m = math.Max(m, math.Abs(a[i]-b[i]))
	}
	return m
}
