//go:build goexperiment.simd && amd64

package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// The AVX512_BF16 apply loop (bf16_amd64.s), both forms, against the Go
// loop it replaces (applyRowsBF16 without it) and, for the scale-only form,
// against narrowBFloat16's scalar rounding of the float32 product: bit for
// bit, on rows whose 32-element chunks are all normal (VCVTNE2PS2BF16's
// path) and on rows with special values: ties, overflow to infinity,
// quiet and signalling NaNs with payloads, zeros, subnormal inputs, and
// normal inputs whose products are subnormal, which VCVTNE2PS2BF16 would
// flush to zero (the integer path's).
func TestBFloat16ApplyLoopsMatch(t *testing.T) {
	if !avx512BF16 || simdApplyBFloat16 == nil {
		t.Skip("no AVX512_BF16 on this CPU")
	}
	const L, rows = 96, 8
	n := L * rows
	rng := rand.New(rand.NewPCG(7, 8))
	bits := func(u uint32) float32 { return math.Float32frombits(u) }
	per := func(base float64) []float32 {
		s := make([]float32, L)
		for i := range s {
			s[i] = float32(base + rng.NormFloat64())
		}
		return s
	}
	a, b, mdy, mu := per(0), per(0), per(0), per(1)
	// Coefficients that make ties (1 + 2⁻⁸ and 1 + 3·2⁻⁸ times a bfloat16
	// lands halfway), tiny ones (subnormal products) and huge ones
	// (overflow), in the channels past the first 32.
	for c, v := range []float32{bits(0x3f808000), bits(0x3f818000), 0x1p-10, 0x1p100, -0x1p-20, bits(0xbf808000)} {
		a[40+c], a[80+c] = v, v
	}
	special := []BFloat16{0x0000, 0x8000, 0x0001, 0x8035, 0x007f, 0x0080, 0x8080, 0x7f7f, 0xff7f,
		0x7f80, 0xff80, 0x7fc0, 0x7fc1, 0xffc3, 0x7f81, 0xff85, 0x3f80, 0xbf80, 0x0480, 0x8480}
	dy, x := make([]BFloat16, n), make([]BFloat16, n)
	for i := range dy {
		dy[i] = BFloat16FromFloat32(float32(rng.NormFloat64()))
		x[i] = BFloat16FromFloat32(float32(1 + rng.NormFloat64()))
		if i >= n/2 { // the second half of the rows: special values
			if k := rng.IntN(3 * len(special)); k < len(special) {
				dy[i] = special[k]
			}
			if k := rng.IntN(3 * len(special)); k < len(special) {
				x[i] = special[k]
			}
		}
	}
	// Normal inputs whose products are subnormal: 2⁻¹²⁰·2⁻¹⁰ = 2⁻¹³⁰, in
	// channels whose affine dx is that product alone.
	dy[n/2+42], dy[n/2+L+82] = BFloat16FromFloat32(0x1p-120), BFloat16FromFloat32(-0x1p-121)
	x[n/2+42], x[n/2+L+82] = 0x3f80, 0x3f80
	b[42], b[82], mdy[42], mdy[82] = 0, 0, 0, 0

	// Which 32-element chunks hold a subnormal product: the first half's
	// rows must hold none (the fast path), the second half's some.
	chunks := func(from, to int) (clean, sub int) {
		for o := from; o < to; o += 32 {
			has := false
			for i := o; i < o+32; i++ {
				v := math.Float32bits(dy[i].Float32() * a[i%L])
				has = has || v&0x7f800000 == 0 && v&0x7fffff != 0
			}
			if has {
				sub++
			} else {
				clean++
			}
		}
		return clean, sub
	}
	clean, sub := chunks(0, n/2)
	require.Equal(t, 0, sub, "the first half's chunks must take VCVTNE2PS2BF16")
	require.Positive(t, clean)
	_, sub = chunks(n/2, n)
	require.Positive(t, sub, "the second half must have chunks for the integer rounding")

	for _, scaleOnly := range []bool{true, false} {
		coef := &affine32{A: a, B: b, MeanDy: mdy, Mean: mu, ScaleOnly: scaleOnly}
		run := func(useBF16, inPlace bool) []BFloat16 {
			defer func(v bool) { avx512BF16 = v }(avx512BF16)
			avx512BF16 = useBF16
			d, xs := make([]BFloat16, n), append([]BFloat16(nil), x...)
			copy(d, dy)
			out := make([]BFloat16, n)
			if inPlace {
				out = d
			}
			applyRowsBF16(L, coef, d, xs, out)
			return out
		}
		want := run(false, false)
		require.Equal(t, want, run(true, false), "scaleOnly=%v", scaleOnly)
		require.Equal(t, want, run(true, true), "scaleOnly=%v, dx over dy", scaleOnly)
		subnormals := 0
		for i, w := range want {
			if w&0x7f80 == 0 && w&0x7f != 0 {
				subnormals++
			}
			if scaleOnly {
				require.Equal(t, BFloat16FromFloat32(dy[i].Float32()*a[i%L]), w, "dx[%d]", i)
			}
		}
		require.Positive(t, subnormals, "scaleOnly=%v: no subnormal dx, the integer path's test", scaleOnly)
	}
}
