package kernels

import "math"

// Half is an IEEE 754 binary16 value, stored as its bits.
type Half uint16

// BFloat16 is a bfloat16 value (the top half of a float32), stored as its bits.
type BFloat16 uint16

// halfTable maps every Half bit pattern to its float32 value.
var halfTable = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = halfBitsToFloat32(uint16(i))
	}
	return &t
}()

// Float32 returns h as a float32 (exact).
func (h Half) Float32() float32 { return halfTable[h] }

// Float32 returns b as a float32 (exact).
func (b BFloat16) Float32() float32 { return math.Float32frombits(uint32(b) << 16) }

// halfBitsToFloat32 decodes binary16 bits field by field.
func halfBitsToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	case mant == 0: // signed zero
		return math.Float32frombits(sign)
	}
	// subnormal: mant · 2^-24
	v := float32(mant) * (1.0 / (1 << 24))
	if sign != 0 {
		v = -v
	}
	return v
}

// HalfFromFloat32 rounds f to the nearest Half, ties to even; overflow gives
// ±Inf and NaN stays NaN.
func HalfFromFloat32(f float32) Half {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return Half(sign | 0x7e00)
		}
		return Half(sign | 0x7c00)
	}
	e := exp - 127 + 15
	if e >= 31 {
		return Half(sign | 0x7c00)
	}
	if e <= 0 {
		if e < -10 {
			return Half(sign)
		}
		mant |= 0x800000
		shift := uint32(14 - e)
		h := mant >> shift
		round := mant>>(shift-1)&1 != 0
		sticky := mant&(1<<(shift-1)-1) != 0
		if round && (sticky || h&1 != 0) {
			h++
		}
		return Half(sign | uint16(h))
	}
	h := uint32(sign) | uint32(e)<<10 | mant>>13
	if mant&0x1000 != 0 && (mant&0xfff != 0 || h&1 != 0) {
		h++ // a carry into the exponent is the correct rounding, up to Inf
	}
	return Half(h)
}

// BFloat16FromFloat32 rounds f to the nearest BFloat16, ties to even; NaN
// stays NaN.
func BFloat16FromFloat32(f float32) BFloat16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return BFloat16(b>>16 | 0x40)
	}
	return BFloat16((b + 0x7fff + (b >> 16 & 1)) >> 16)
}
