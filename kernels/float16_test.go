package kernels_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/kernels"
)

// halfDecode decodes binary16 bits field by field with math.Ldexp, as an
// independent reference for Half.Float32. isNaN reports a NaN pattern, for
// which value is meaningless.
func halfDecode(h uint16) (value float64, isNaN bool) {
	negative := h&0x8000 != 0
	exp := int(h>>10) & 0x1f
	mant := int(h & 0x3ff)
	switch {
	case exp == 0x1f && mant != 0:
		return 0, true
	case exp == 0x1f:
		value = math.Inf(1)
	case exp == 0:
		value = math.Ldexp(float64(mant), -24) // subnormal or zero
	default:
		value = math.Ldexp(float64(1024+mant), exp-15-10)
	}
	if negative {
		value = math.Copysign(value, -1)
	}
	return value, false
}

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

func TestHalfRoundTripAllPatterns(t *testing.T) {
	for i := range 1 << 16 {
		h := kernels.Half(i)
		got := kernels.HalfFromFloat32(h.Float32())
		if isHalfNaN(h) {
			if !isHalfNaN(got) {
				t.Errorf("HalfFromFloat32(Half(%#04x).Float32()) = %#04x, want NaN", uint16(h), uint16(got))
			}
			if got&0x8000 != h&0x8000 {
				t.Errorf("HalfFromFloat32(Half(%#04x).Float32()) = %#04x: NaN sign lost", uint16(h), uint16(got))
			}
			continue
		}
		if got != h {
			t.Errorf("HalfFromFloat32(Half(%#04x).Float32()) = %#04x", uint16(h), uint16(got))
		}
	}
}

func TestHalfFromFloat32NaN(t *testing.T) {
	for _, bits := range []uint32{
		0x7fc00000, 0xffc00000, // quiet NaNs
		0x7f800001, 0xff800001, // signalling NaNs whose payload lies below binary16's mantissa
		0x7fffffff, 0xffffffff, 0x7fa00000, 0x7f802000,
	} {
		f := math.Float32frombits(bits)
		got := kernels.HalfFromFloat32(f)
		assert.Truef(t, isHalfNaN(got), "HalfFromFloat32(%#08x) = %#04x, want NaN", bits, uint16(got))
		assert.Equalf(t, bits&0x80000000 != 0, got&0x8000 != 0, "HalfFromFloat32(%#08x) = %#04x: NaN sign", bits, uint16(got))
	}
	assert.Equal(t, kernels.Half(0x7c00), kernels.HalfFromFloat32(float32(math.Inf(1))))
	assert.Equal(t, kernels.Half(0xfc00), kernels.HalfFromFloat32(float32(math.Inf(-1))))
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
	for _, tc := range []struct {
		name string
		in   float32
		want kernels.Half
	}{
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equalf(t, tc.want, kernels.HalfFromFloat32(tc.in), "HalfFromFloat32(%v)", tc.in)
		})
	}
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

// bfloat16Decode decodes bfloat16 bits field by field with math.Ldexp.
func bfloat16Decode(b uint16) (value float64, isNaN bool) {
	negative := b&0x8000 != 0
	exp := int(b>>7) & 0xff
	mant := int(b & 0x7f)
	switch {
	case exp == 0xff && mant != 0:
		return 0, true
	case exp == 0xff:
		value = math.Inf(1)
	case exp == 0:
		value = math.Ldexp(float64(mant), -126-7)
	default:
		value = math.Ldexp(float64(128+mant), exp-127-7)
	}
	if negative {
		value = math.Copysign(value, -1)
	}
	return value, false
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
		want, nan := bfloat16Decode(b)
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

func TestBFloat16RoundTripAllPatterns(t *testing.T) {
	for i := range 1 << 16 {
		b := kernels.BFloat16(i)
		got := kernels.BFloat16FromFloat32(b.Float32())
		if isBFloat16NaN(b) {
			if !isBFloat16NaN(got) {
				t.Errorf("BFloat16FromFloat32(BFloat16(%#04x).Float32()) = %#04x, want NaN", uint16(b), uint16(got))
			}
			if got&0x8000 != b&0x8000 {
				t.Errorf("BFloat16FromFloat32(BFloat16(%#04x).Float32()) = %#04x: NaN sign lost", uint16(b), uint16(got))
			}
			continue
		}
		if got != b {
			t.Errorf("BFloat16FromFloat32(BFloat16(%#04x).Float32()) = %#04x", uint16(b), uint16(got))
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
	for _, tc := range []struct {
		name string
		in   float32
		want kernels.BFloat16
	}{
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equalf(t, tc.want, kernels.BFloat16FromFloat32(tc.in), "BFloat16FromFloat32(%v)", tc.in)
		})
	}
}

func TestBFloat16FromFloat32NaN(t *testing.T) {
	for _, bits := range []uint32{
		0x7fc00000, 0xffc00000,
		0x7f800001, 0xff800001, // payload only in the bits bfloat16 drops
		0x7f80ffff, 0x7fffffff, 0xffffffff, 0x7fa00000,
	} {
		got := kernels.BFloat16FromFloat32(math.Float32frombits(bits))
		assert.Truef(t, isBFloat16NaN(got), "BFloat16FromFloat32(%#08x) = %#04x, want NaN", bits, uint16(got))
		assert.Equalf(t, bits&0x80000000 != 0, got&0x8000 != 0, "BFloat16FromFloat32(%#08x) = %#04x: NaN sign", bits, uint16(got))
	}
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
