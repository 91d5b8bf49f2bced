package kernels_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/kernels"
)

// decode16 decodes the bits of a 16-bit IEEE-style float with mantBits
// mantissa bits (binary16: 10, bfloat16: 7) field by field with math.Ldexp,
// as an independent reference for Float32. isNaN reports a NaN pattern, for
// which value is meaningless.
func decode16(bits uint16, mantBits int) (value float64, isNaN bool) {
	expMax := 1<<(15-mantBits) - 1
	bias := expMax >> 1
	exp := int(bits>>mantBits) & expMax
	mant := int(bits) & (1<<mantBits - 1)
	switch {
	case exp == expMax && mant != 0:
		return 0, true
	case exp == expMax:
		value = math.Inf(1)
	case exp == 0:
		value = math.Ldexp(float64(mant), 1-bias-mantBits) // subnormal or zero
	default:
		value = math.Ldexp(float64(1<<mantBits+mant), exp-bias-mantBits)
	}
	if bits&0x8000 != 0 {
		value = math.Copysign(value, -1)
	}
	return value, false
}

func halfDecode(h uint16) (float64, bool) { return decode16(h, 10) }

// halfEncode encodes v, which must be ±0, ±Inf or exactly a finite binary16
// value, as binary16 bits.
func halfEncode(v float64) uint16 {
	var sign uint16
	if math.Signbit(v) {
		sign = 0x8000
	}
	a := math.Abs(v)
	switch {
	case math.IsInf(a, 1):
		return sign | 0x7c00
	case a < 0x1p-14: // subnormal or zero: a = mant·2^-24
		return sign | uint16(a*0x1p24)
	}
	frac, exp := math.Frexp(a) // a = frac·2^exp, frac in [0.5, 1)
	mant := uint16(frac*2048) - 1024
	return sign | uint16(exp-1+15)<<10 | mant
}

// halfRoundReference rounds the finite float64 v to the nearest binary16 value
// with ties to even, overflow to ±Inf, by scaling to an integer multiple of
// the binary16 quantum at v's exponent.
func halfRoundReference(v float64) uint16 {
	a := math.Abs(v)
	var r float64
	if a != 0 {
		_, exp := math.Frexp(a) // a in [2^(exp-1), 2^exp)
		e := max(exp-1, -14)    // binary16 exponent, clamped to the subnormal one
		quantum := math.Ldexp(1, e-10)
		r = math.RoundToEven(a/quantum) * quantum
	}
	if r > 65504 {
		r = math.Inf(1)
	}
	return halfEncode(math.Copysign(r, v))
}

func isHalfNaN(h kernels.Half) bool { return h&0x7c00 == 0x7c00 && h&0x3ff != 0 }

func isBFloat16NaN(b kernels.BFloat16) bool { return b&0x7f80 == 0x7f80 && b&0x7f != 0 }

// float16 is one of the 16-bit float types.
type float16 interface {
	kernels.Half | kernels.BFloat16
	Float32() float32
}

// format16 is what the tests common to Half and BFloat16 need of the type.
type format16[T float16] struct {
	fromFloat32 func(float32) T
	isNaN       func(T) bool
	nans        []uint32 // float32 NaNs, quiet and signalling, that must stay NaN
	// widenKeepsNaNs: the block conversion to float32 keeps a NaN's payload.
	widenKeepsNaNs bool
}

var (
	halfFormat = format16[kernels.Half]{kernels.HalfFromFloat32, isHalfNaN, []uint32{
		0x7fc00000, 0xffc00000, // quiet NaNs
		0x7f800001, 0xff800001, // signalling NaNs whose payload lies below binary16's mantissa
		0x7fffffff, 0xffffffff, 0x7fa00000, 0x7f802000,
	}, false}
	bfloat16Format = format16[kernels.BFloat16]{kernels.BFloat16FromFloat32, isBFloat16NaN, []uint32{
		0x7fc00000, 0xffc00000,
		0x7f800001, 0xff800001, // payload only in the bits bfloat16 drops
		0x7f80ffff, 0x7fffffff, 0xffffffff, 0x7fa00000,
	}, true}
)

// edgeCase is a float32 and the 16-bit value it must round to.
type edgeCase[T float16] struct {
	name string
	in   float32
	want T
}

func checkEdges[T float16](t *testing.T, fromFloat32 func(float32) T, cases []edgeCase[T]) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equalf(t, tc.want, fromFloat32(tc.in), "from %v", tc.in)
		})
	}
}

// testRoundTripAllPatterns: every pattern converts to float32 and back to
// itself, a NaN to a NaN of the same sign.
func testRoundTripAllPatterns[T float16](t *testing.T, f format16[T]) {
	for i := range 1 << 16 {
		h := T(i)
		got := f.fromFloat32(h.Float32())
		if f.isNaN(h) {
			if !f.isNaN(got) {
				t.Errorf("%#04x round trip = %#04x, want NaN", uint16(h), uint16(got))
			}
			if got&0x8000 != h&0x8000 {
				t.Errorf("%#04x round trip = %#04x: NaN sign lost", uint16(h), uint16(got))
			}
			continue
		}
		if got != h {
			t.Errorf("%#04x round trip = %#04x", uint16(h), uint16(got))
		}
	}
}

func TestRoundTripAllPatterns(t *testing.T) {
	t.Run("Half", func(t *testing.T) { testRoundTripAllPatterns(t, halfFormat) })
	t.Run("BFloat16", func(t *testing.T) { testRoundTripAllPatterns(t, bfloat16Format) })
}

// testFromFloat32NaN: float32 NaNs become NaNs of the same sign.
func testFromFloat32NaN[T float16](t *testing.T, f format16[T]) {
	for _, bits := range f.nans {
		got := f.fromFloat32(math.Float32frombits(bits))
		assert.Truef(t, f.isNaN(got), "from %#08x = %#04x, want NaN", bits, uint16(got))
		assert.Equalf(t, bits&0x80000000 != 0, got&0x8000 != 0, "from %#08x = %#04x: NaN sign", bits, uint16(got))
	}
}

func TestFromFloat32NaN(t *testing.T) {
	t.Run("Half", func(t *testing.T) {
		testFromFloat32NaN(t, halfFormat)
		assert.Equal(t, kernels.Half(0x7c00), kernels.HalfFromFloat32(float32(math.Inf(1))))
		assert.Equal(t, kernels.Half(0xfc00), kernels.HalfFromFloat32(float32(math.Inf(-1))))
	})
	t.Run("BFloat16", func(t *testing.T) { testFromFloat32NaN(t, bfloat16Format) })
}

func TestHalfFloat32AllPatterns(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		got := kernels.Half(h).Float32()
		want, nan := halfDecode(h)
		if nan {
			if !math.IsNaN(float64(got)) {
				t.Errorf("Half(%#04x).Float32() = %v, want NaN", h, got)
			}
			if math.Signbit(float64(got)) != (h&0x8000 != 0) {
				t.Errorf("Half(%#04x).Float32() = %#08x: NaN sign lost", h, math.Float32bits(got))
			}
			continue
		}
		// Every binary16 value is exact in float32; compare bits so the sign
		// of zero counts.
		if math.Float32bits(got) != math.Float32bits(float32(want)) {
			t.Errorf("Half(%#04x).Float32() = %v (%#08x), want %v", h, got, math.Float32bits(got), want)
		}
	}
}

// TestHalfFromFloat32Midpoints checks every pair of adjacent finite binary16
// values of either sign: the midpoint (exact in float32) rounds to the one
// with an even mantissa, and the float32 neighbours of the midpoint round to
// the nearer value.
func TestHalfFromFloat32Midpoints(t *testing.T) {
	for _, sign := range []uint16{0, 0x8000} {
		// lo runs over every finite magnitude; hi = lo+1 is the next one up,
		// 0x7c00 (Inf) after the largest finite value, 65504.
		for lo := uint16(0); lo < 0x7c00; lo++ {
			hi := lo + 1
			a, _ := halfDecode(sign | lo)
			var b float64
			if hi == 0x7c00 {
				b = math.Copysign(65536, a) // where the next value would lie
			} else {
				b, _ = halfDecode(sign | hi)
			}
			mid := float32((a + b) / 2)
			require.Equal(t, (a+b)/2, float64(mid), "midpoint must be exact in float32")
			even := sign | lo
			if lo&1 != 0 {
				even = sign | hi
			}
			if got := kernels.HalfFromFloat32(mid); uint16(got) != even {
				t.Errorf("HalfFromFloat32(%v) = %#04x, want %#04x (tie to even between %#04x and %#04x)", mid, uint16(got), even, sign|lo, sign|hi)
			}
			toward0 := math.Nextafter32(mid, 0)
			away := math.Nextafter32(mid, float32(math.Copysign(math.Inf(1), a)))
			if got := kernels.HalfFromFloat32(toward0); uint16(got) != sign|lo {
				t.Errorf("HalfFromFloat32(%v) = %#04x, want %#04x", toward0, uint16(got), sign|lo)
			}
			if got := kernels.HalfFromFloat32(away); uint16(got) != sign|hi {
				t.Errorf("HalfFromFloat32(%v) = %#04x, want %#04x", away, uint16(got), sign|hi)
			}
		}
	}
}

func TestHalfFromFloat32Edges(t *testing.T) {
	checkEdges(t, kernels.HalfFromFloat32, []edgeCase[kernels.Half]{
		{"zero", 0, 0x0000},
		{"negative zero", float32(math.Copysign(0, -1)), 0x8000},
		{"one", 1, 0x3c00},
		{"minus two", -2, 0xc000},
		{"largest finite", 65504, 0x7bff},
		{"just below overflow threshold", math.Nextafter32(65520, 0), 0x7bff},
		{"overflow threshold", 65520, 0x7c00},
		{"negative overflow threshold", -65520, 0xfc00},
		{"2^16", 65536, 0x7c00},
		{"1e10", 1e10, 0x7c00},
		{"max float32", math.MaxFloat32, 0x7c00},
		{"minus max float32", -math.MaxFloat32, 0xfc00},
		{"smallest normal", 0x1p-14, 0x0400},
		{"largest subnormal", 1023 * 0x1p-24, 0x03ff},
		{"smallest subnormal", 0x1p-24, 0x0001},
		{"minus smallest subnormal", -0x1p-24, 0x8001},
		{"half of smallest subnormal ties to zero", 0x1p-25, 0x0000},
		{"negative half of smallest subnormal ties to minus zero", -0x1p-25, 0x8000},
		{"just above half of smallest subnormal", math.Nextafter32(0x1p-25, 1), 0x0001},
		{"three halves of smallest subnormal ties to two", 3 * 0x1p-25, 0x0002},
		{"2^-26 underflows", 0x1p-26, 0x0000},
		{"smallest float32 normal underflows", 0x1p-126, 0x0000},
		{"float32 subnormal underflows", 0x1p-149, 0x0000},
		{"negative float32 subnormal underflows to minus zero", -0x1p-149, 0x8000},
		{"largest subnormal rounds up into normal", 1023.5 * 0x1p-24, 0x0400},
		{"1 + 2^-11 ties to 1", 1 + 0x1p-11, 0x3c00},
		{"1 + 3·2^-11 ties to 1 + 2^-9", 1 + 3*0x1p-11, 0x3c02},
		{"2047.5 rounds to 2048", 2047.5, 0x6800},
	})
}

// TestHalfFromFloat32Random compares HalfFromFloat32 with a float64 rounding
// reference on random float32 values concentrated on binary16's range.
func TestHalfFromFloat32Random(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1 << 20 {
		// Exponents from 2^-30 to 2^17 cover underflow, subnormals, normals
		// and overflow; the mantissa is uniform over all 23 bits.
		exp := uint32(127-30) + rng.Uint32N(48)
		bits := rng.Uint32()&0x80000000 | exp<<23 | rng.Uint32()&0x7fffff
		f := math.Float32frombits(bits)
		want := halfRoundReference(float64(f))
		if got := kernels.HalfFromFloat32(f); uint16(got) != want {
			t.Fatalf("HalfFromFloat32(%v = %#08x) = %#04x, want %#04x", f, bits, uint16(got), want)
		}
	}
}

// bfloat16RoundReference rounds the finite float64 v (a float32 value) to the
// nearest bfloat16 with ties to even, overflow to ±Inf, and returns its bits.
func bfloat16RoundReference(v float64) uint16 {
	a := math.Abs(v)
	var r float64
	if a != 0 {
		_, exp := math.Frexp(a)
		e := max(exp-1, -126)
		quantum := math.Ldexp(1, e-7)
		r = math.RoundToEven(a/quantum) * quantum
	}
	if r >= 0x1p128 {
		r = math.Inf(1)
	}
	// r is ±0, Inf or a bfloat16 value, so its float32 bits end in 16 zeros.
	bits := math.Float32bits(float32(math.Copysign(r, v)))
	if bits&0xffff != 0 {
		panic("bfloat16RoundReference: not a bfloat16 value")
	}
	return uint16(bits >> 16)
}

func TestBFloat16Float32AllPatterns(t *testing.T) {
	for i := range 1 << 16 {
		b := uint16(i)
		got := kernels.BFloat16(b).Float32()
		want, nan := decode16(b, 7)
		if nan {
			if !math.IsNaN(float64(got)) {
				t.Errorf("BFloat16(%#04x).Float32() = %v, want NaN", b, got)
			}
			continue
		}
		if math.Float32bits(got) != math.Float32bits(float32(want)) {
			t.Errorf("BFloat16(%#04x).Float32() = %v, want %v", b, got, want)
		}
	}
}

// TestBFloat16FromFloat32Midpoints checks every pair of adjacent finite
// bfloat16 values, as for Half: the midpoint is the float32 with the low 16
// bits 0x8000.
func TestBFloat16FromFloat32Midpoints(t *testing.T) {
	for _, sign := range []uint32{0, 0x80000000} {
		for lo := uint32(0); lo < 0x7f80; lo++ {
			hi := lo + 1 // 0x7f80 is Inf: the largest finite value ties to Inf (even)
			midBits := sign | lo<<16 | 0x8000
			mid := math.Float32frombits(midBits)
			even := lo
			if lo&1 != 0 {
				even = hi
			}
			want := uint16((sign >> 16) | even)
			if got := kernels.BFloat16FromFloat32(mid); uint16(got) != want {
				t.Errorf("BFloat16FromFloat32(%#08x) = %#04x, want %#04x", midBits, uint16(got), want)
			}
			if got := kernels.BFloat16FromFloat32(math.Float32frombits(midBits - 1)); uint16(got) != uint16(sign>>16|lo) {
				t.Errorf("BFloat16FromFloat32(%#08x) = %#04x, want %#04x", midBits-1, uint16(got), sign>>16|lo)
			}
			if got := kernels.BFloat16FromFloat32(math.Float32frombits(midBits + 1)); uint16(got) != uint16(sign>>16|hi) {
				t.Errorf("BFloat16FromFloat32(%#08x) = %#04x, want %#04x", midBits+1, uint16(got), sign>>16|hi)
			}
		}
	}
}

func TestBFloat16FromFloat32Edges(t *testing.T) {
	checkEdges(t, kernels.BFloat16FromFloat32, []edgeCase[kernels.BFloat16]{
		{"zero", 0, 0x0000},
		{"negative zero", float32(math.Copysign(0, -1)), 0x8000},
		{"one", 1, 0x3f80},
		{"Inf", float32(math.Inf(1)), 0x7f80},
		{"minus Inf", float32(math.Inf(-1)), 0xff80},
		{"max float32 overflows", math.MaxFloat32, 0x7f80},
		{"minus max float32 overflows", -math.MaxFloat32, 0xff80},
		{"largest finite bfloat16", math.Float32frombits(0x7f7f0000), 0x7f7f},
		{"just below overflow threshold", math.Float32frombits(0x7f7f7fff), 0x7f7f},
		{"overflow threshold", math.Float32frombits(0x7f7f8000), 0x7f80},
		{"1 + 2^-8 ties to 1", 1 + 0x1p-8, 0x3f80},
		{"1 + 3·2^-8 ties to 1 + 2^-6", 1 + 3*0x1p-8, 0x3f82},
		{"smallest float32 subnormal rounds to zero", 0x1p-149, 0x0000},
		{"float32 subnormal tie to even", math.Float32frombits(0x00018000), 0x0002},
		{"float32 subnormal tie to zero", math.Float32frombits(0x00008000), 0x0000},
		{"largest float32 subnormal rounds to smallest normal", math.Float32frombits(0x007fffff), 0x0080},
	})
}

// TestBFloat16FromFloat32Random compares BFloat16FromFloat32 with a float64
// rounding reference on random finite float32 values of every exponent.
func TestBFloat16FromFloat32Random(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 1 << 20 {
		bits := rng.Uint32()
		if bits&0x7f800000 == 0x7f800000 {
			continue // NaN and Inf are covered above
		}
		f := math.Float32frombits(bits)
		want := bfloat16RoundReference(float64(f))
		if got := kernels.BFloat16FromFloat32(f); uint16(got) != want {
			t.Fatalf("BFloat16FromFloat32(%v = %#08x) = %#04x, want %#04x", f, bits, uint16(got), want)
		}
	}
}
