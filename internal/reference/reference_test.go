package reference_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gobn/gobn/internal/reference"
)

// The references against cases worked by hand from docs/design.md's
// formulas: N = 1, S = 3, C = 2, ε = 0.25, and per channel
//
//	channel 0: x = 0 1 2,  μ = 1, σ² = 3.75 (c = ½), scale = 2,  dy = 1 2 6
//	channel 1: x = 4 4 4,  μ = 3, σ² = 0    (c = 2), scale = −1, dy = 1 −1 3
//
// so Σdy = 9, 3 and Σdy·(x−μ) = 5, 3 (R = 3). The global normalization
// takes the same numbers as t, m, v, γ and backprop (s = ½, 2).

const epsilon = 0.25

var (
	mean     = []float64{1, 3}
	variance = []float64{3.75, 0}
	scale    = []float64{2, -1}
)

// layout is the case in one layout: the shape, and x, dy and an output
// given channel by channel laid out by hand.
type layout struct {
	name  string
	shape reference.Shape
	// flat lays out three elements of channel 0 and three of channel 1.
	flat func(c0, c1 [3]float64) []float64
}

var layouts = []layout{
	{"channels first", reference.Shape{N: 1, C: 2, S: 3}, func(a, b [3]float64) []float64 {
		return []float64{a[0], a[1], a[2], b[0], b[1], b[2]}
	}},
	{"channels last", reference.Shape{N: 1, C: 2, S: 3, ChannelsLast: true}, func(a, b [3]float64) []float64 {
		return []float64{a[0], b[0], a[1], b[1], a[2], b[2]}
	}},
}

func (l layout) x() []float64  { return l.flat([3]float64{0, 1, 2}, [3]float64{4, 4, 4}) }
func (l layout) dy() []float64 { return l.flat([3]float64{1, 2, 6}, [3]float64{1, -1, 3}) }

const exact = 1e-14

func TestShape(t *testing.T) {
	first := reference.Shape{N: 2, C: 3, S: 2}
	last := reference.Shape{N: 2, C: 3, S: 2, ChannelsLast: true}
	for _, e := range []struct {
		sh        reference.Shape
		n, c, s   int
		wantIndex int
	}{
		{first, 0, 1, 0, 2}, {first, 1, 2, 1, 11}, {first, 1, 0, 0, 6}, {first, 0, 0, 1, 1},
		{last, 0, 1, 0, 1}, {last, 1, 2, 1, 11}, {last, 1, 0, 0, 6}, {last, 0, 0, 1, 3},
	} {
		assert.Equal(t, e.wantIndex, e.sh.Index(e.n, e.c, e.s), "%+v Index(%d, %d, %d)", e.sh, e.n, e.c, e.s)
		assert.Equal(t, e.c, e.sh.Channel(e.wantIndex), "%+v Channel(%d)", e.sh, e.wantIndex)
	}
	assert.Equal(t, 12, first.Len())
	assert.Equal(t, 4, first.PerChannel())
	for _, l := range layouts {
		var channels []float64
		for i := range l.shape.Len() {
			channels = append(channels, float64(l.shape.Channel(i)))
		}
		assert.Equal(t, l.flat([3]float64{0, 0, 0}, [3]float64{1, 1, 1}), channels, l.name)
	}
}

func TestGradReduce(t *testing.T) {
	for _, l := range layouts {
		s := reference.GradReduce(l.shape, l.dy(), l.x(), mean)
		assert.InDeltaSlice(t, []float64{9, 3}, s.Dy, exact, l.name)
		assert.InDeltaSlice(t, []float64{5, 3}, s.DyXmu, exact, l.name)
	}
	// Merge adds channel by channel; Add adds dy and dy·(x−mean).
	s := reference.NewSums(2)
	s.Add(1, 2, 5, 3)
	o := reference.NewSums(2)
	o.Add(0, -1, 0, 1)
	s.Merge(o)
	assert.Equal(t, reference.Sums{Dy: []float64{-1, 2}, DyXmu: []float64{1, 4}}, s)
}

func TestFusedGrad(t *testing.T) {
	for _, l := range layouts {
		for _, c := range []struct {
			training      bool
			xBackprop     []float64
			wantMagnitude float64
		}{
			// x_backprop = scale·c·(dy − Σdy/R − (x−μ)·c²·Σdy·(x−μ)/R):
			// channel 0: dy − 3 − (x−1)·5/12; channel 1: −2·(dy − 1 − 4).
			// The magnitude |scale·c|·(|dy| + |Σdy/R| + |(x−μ)·c²·Σdy·(x−μ)/R|)
			// is largest at channel 1's dy = 3: 2·(3 + 1 + 4).
			{true, l.flat([3]float64{-19.0 / 12, -1, 31.0 / 12}, [3]float64{8, 12, 4}), 16},
			// x_backprop = dy·scale·c: dy, −2·dy; the magnitude is |x_backprop|.
			{false, l.flat([3]float64{1, 2, 6}, [3]float64{-2, 2, -6}), 6},
		} {
			got := reference.FusedGrad(l.shape, l.dy(), l.x(), scale, mean, variance, epsilon, c.training)
			assert.InDeltaSlice(t, c.xBackprop, got.XBackprop, exact, "%s training=%v x_backprop", l.name, c.training)
			assert.InDelta(t, c.wantMagnitude, got.XBackpropMagnitude, exact, "%s training=%v magnitude", l.name, c.training)
			// offset_backprop = Σdy, scale_backprop = c·Σdy·(x−μ) in both modes
			assert.InDeltaSlice(t, []float64{9, 3}, got.OffsetBackprop, exact, "%s offset_backprop", l.name)
			assert.InDeltaSlice(t, []float64{2.5, 6}, got.ScaleBackprop, exact, "%s scale_backprop", l.name)
		}
	}
}

// TestFusedGradNaN: a NaN in x reaches the training x_backprop of its
// channel only, and not the inference x_backprop, which does not involve x;
// the magnitude leaves it out.
func TestFusedGradNaN(t *testing.T) {
	l := layouts[1]
	x := l.x()
	x[l.shape.Index(0, 1, 2)] = math.NaN()
	train := reference.FusedGrad(l.shape, l.dy(), x, scale, mean, variance, epsilon, true)
	for i, v := range train.XBackprop {
		assert.Equal(t, l.shape.Channel(i) == 1, math.IsNaN(v), "training x_backprop[%d] = %v", i, v)
	}
	assert.InDelta(t, 113.0/12, train.XBackpropMagnitude, exact, "channel 0's largest: 6 + 3 + 5/12")
	infer := reference.FusedGrad(l.shape, l.dy(), x, scale, mean, variance, epsilon, false)
	assert.InDeltaSlice(t, l.flat([3]float64{1, 2, 6}, [3]float64{-2, 2, -6}), infer.XBackprop, exact)
}

func TestGradApply(t *testing.T) {
	// Sums and a count of every replica, not this tensor's: Σdy = 12, −2,
	// Σdy·(x−μ) = −6, 6 over 4 elements a channel. Channel 0:
	// dy − 3 − (x−1)·¼·(−6)/4; channel 1: −2·(dy + ½ − (x−3)·4·6/4).
	sums := reference.Sums{Dy: []float64{12, -2}, DyXmu: []float64{-6, 6}}
	for _, l := range layouts {
		got, magnitude := reference.GradApply(sums, 4, scale, mean, variance, epsilon).Apply(l.shape, l.dy(), l.x())
		assert.InDeltaSlice(t, l.flat([3]float64{-2.375, -1, 3.375}, [3]float64{9, 13, 5}), got, exact, l.name)
		assert.InDelta(t, 2*(3+0.5+6), magnitude, exact, l.name)
		// a tensor of no elements has no count: dy·scale·c
		got, _ = reference.GradApply(sums, 0, scale, mean, variance, epsilon).Apply(l.shape, l.dy(), l.x())
		assert.InDeltaSlice(t, l.flat([3]float64{1, 2, 6}, [3]float64{-2, 2, -6}), got, exact, l.name)
	}
}

func TestGlobalNormalizationGrad(t *testing.T) {
	for _, l := range layouts {
		for _, c := range []struct {
			scaleAfter bool
			want       reference.Global
		}{
			// γ' = γ: dx = dy·s·γ' = dy, −2·dy; dm = −Σdy·s·γ';
			// dg = s·Σdy·(t−m); dv = −½·s³·γ'·Σdy·(t−m) = −½·⅛·2·5, −½·8·(−1)·3
			{true, reference.Global{DX: l.flat([3]float64{1, 2, 6}, [3]float64{-2, 2, -6}),
				DM: []float64{-9, 6}, DV: []float64{-0.625, 12}, DB: []float64{9, 3}, DG: []float64{2.5, 6}}},
			// γ' = 1: dx = dy·s; dg = 0
			{false, reference.Global{DX: l.flat([3]float64{0.5, 1, 3}, [3]float64{2, -2, 6}),
				DM: []float64{-4.5, -6}, DV: []float64{-0.3125, -12}, DB: []float64{9, 3}, DG: []float64{0, 0}}},
		} {
			got := reference.GlobalNormalizationGrad(l.shape, l.x(), mean, variance, scale, l.dy(), epsilon, c.scaleAfter)
			for _, o := range []struct {
				name      string
				got, want []float64
			}{{"dx", got.DX, c.want.DX}, {"dm", got.DM, c.want.DM}, {"dv", got.DV, c.want.DV},
				{"db", got.DB, c.want.DB}, {"dg", got.DG, c.want.DG}} {
				assert.InDeltaSlice(t, o.want, o.got, exact, "%s scale_after_normalization=%v %s", l.name, c.scaleAfter, o.name)
			}
		}
	}
}

// TestEmpty: a batch of no elements has zero sums, 1-D outputs of zeros
// and an empty activation.
func TestEmpty(t *testing.T) {
	sh := reference.Shape{N: 0, C: 2, S: 3, ChannelsLast: true}
	f := reference.FusedGrad(sh, nil, nil, scale, mean, variance, epsilon, true)
	assert.Empty(t, f.XBackprop)
	assert.Equal(t, []float64{0, 0}, f.OffsetBackprop)
	assert.Equal(t, []float64{0, 0}, f.ScaleBackprop)
	g := reference.GlobalNormalizationGrad(sh, nil, mean, variance, scale, nil, epsilon, true)
	assert.Empty(t, g.DX)
	assert.Equal(t, []float64{0, 0}, g.DB)
}
