// Package reference is the naive float64 reference of gobn's gradients and
// the comparison of an output with it, for the Go tests of kernels,
// kernels/cuda and ops: every implementation is checked by the same
// reference and the same helpers, as gonum's blas/testblas checks every
// BLAS. The formulas are docs/design.md's ("The backward formulas"), written
// with explicit index arithmetic; nothing here calls gobn's kernels.
//
// A gradient comes in two forms: per channel, from the sums over a
// channel's elements (Sums), with its activation-shaped output as the terms
// of Activation, which a test that cannot hold the whole output in float64
// evaluates element by element; and whole, over a Shape's slices.
package reference

import "math"

// Shape is an activation tensor seen as N × C × S (S the product of the
// spatial dimensions), with the channel axis last (NHWC, NDHWC) or second
// (NCHW, NCDHW).
type Shape struct {
	N, C, S      int
	ChannelsLast bool
}

// Len returns the number of elements, N·C·S.
func (sh Shape) Len() int { return sh.N * sh.C * sh.S }

// PerChannel returns R = N·S, the elements of one channel.
func (sh Shape) PerChannel() int { return sh.N * sh.S }

// Index returns the flat index of element (n, c, s).
func (sh Shape) Index(n, c, s int) int {
	if sh.ChannelsLast {
		return (n*sh.S+s)*sh.C + c
	}
	return (n*sh.C+c)*sh.S + s
}

// Channel returns the channel of the element at flat index i.
func (sh Shape) Channel(i int) int {
	if sh.ChannelsLast {
		return i % sh.C
	}
	return i / sh.S % sh.C
}

// Sums are the per-channel sums every gradient is made of: Σdy and
// Σdy·(x−μ) over a channel's elements (BatchNormGradReduce's sum_dy and
// sum_dy_xmu; Σdy·(t−m) for the global normalization's t and m).
type Sums struct {
	Dy, DyXmu []float64
}

// NewSums returns zero sums for C channels.
func NewSums(C int) Sums {
	return Sums{Dy: make([]float64, C), DyXmu: make([]float64, C)}
}

// Add adds one element of channel c: dy, and x with the channel's mean.
func (s Sums) Add(c int, dy, x, mean float64) {
	s.Dy[c] += dy
	s.DyXmu[c] += dy * (x - mean)
}

// Merge adds o's sums into s, channel by channel.
func (s Sums) Merge(o Sums) {
	for c := range s.Dy {
		s.Dy[c] += o.Dy[c]
		s.DyXmu[c] += o.DyXmu[c]
	}
}

// InvStd returns c = 1/sqrt(σ²+ε) per channel.
func InvStd(variance []float64, epsilon float64) []float64 {
	inv := make([]float64, len(variance))
	for c, v := range variance {
		inv[c] = 1 / math.Sqrt(v+epsilon)
	}
	return inv
}

// Activation is an activation-shaped gradient by its per-channel terms: for
// element i, of channel c,
//
//	out[i] = Gain[c] · (dy[i] − MeanDy[c] − (x[i] − Mean[c])·Slope[c])
//
// which is the training x_backprop with Gain = scale·c, MeanDy = Σdy/R and
// Slope = c²·Σdy·(x−μ)/R. Without MeanDy and Slope (nil) it is dy·Gain: the
// inference x_backprop (Gain = scale·c) and the global normalization's dx
// (Gain = s·γ'), which do not involve x.
type Activation struct {
	Gain, MeanDy, Mean, Slope []float64
}

// At returns the element of channel c for dy and x.
func (a Activation) At(c int, dy, x float64) float64 {
	v := dy
	if a.MeanDy != nil {
		v -= a.MeanDy[c]
	}
	if a.Slope != nil {
		v -= (x - a.Mean[c]) * a.Slope[c]
	}
	return a.Gain[c] * v
}

// Magnitude returns the size of At's terms,
// |Gain[c]|·(|dy| + |MeanDy[c]| + |(x − Mean[c])·Slope[c]|): an
// implementation's rounding error is relative to it, not to At's value,
// which in training can be a small difference of large terms (a channel of
// one element has x_backprop 0 in exact arithmetic).
func (a Activation) Magnitude(c int, dy, x float64) float64 {
	m := math.Abs(dy)
	if a.MeanDy != nil {
		m += math.Abs(a.MeanDy[c])
	}
	if a.Slope != nil {
		m += math.Abs((x - a.Mean[c]) * a.Slope[c])
	}
	return math.Abs(a.Gain[c]) * m
}

// Apply returns the activation over sh, and the largest finite Magnitude of
// its elements.
func (a Activation) Apply(sh Shape, dy, x []float64) (out []float64, magnitude float64) {
	out = make([]float64, sh.Len())
	for i := range out {
		c := sh.Channel(i)
		out[i] = a.At(c, dy[i], x[i])
		if m := a.Magnitude(c, dy[i], x[i]); !math.IsNaN(m) && !math.IsInf(m, 0) {
			magnitude = max(magnitude, m)
		}
	}
	return out, magnitude
}

// inference returns the inference x_backprop, dy·scale·c.
func inference(scale, mean, variance []float64, epsilon float64) Activation {
	inv := InvStd(variance, epsilon)
	a := Activation{Gain: make([]float64, len(inv)), Mean: mean}
	for c := range inv {
		a.Gain[c] = scale[c] * inv[c]
	}
	return a
}
