//go:build goexperiment.simd && amd64

package kernels

import (
	"simd/archsimd"
	"unsafe"
)

// The AVX-512 forms of the float32 row and run loops of simd_amd64.go: the
// same arithmetic on vectors twice as wide, which halves the instructions
// per element where the AVX2 loops are limited by them rather than by
// memory (channels-last sums keep their accumulators in memory).

// load16 returns the sixteen float32s at p[i:].
func load16(p unsafe.Pointer, i int) archsimd.Float32x16 {
	return archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(p, 4*i)))
}

// store16 writes v to p[i:i+16].
func store16(v archsimd.Float32x16, p unsafe.Pointer, i int) {
	v.Store((*[16]float32)(unsafe.Add(p, 4*i)))
}

// widen8 returns the eight float32s at p[i:] as float64s.
func widen8(p unsafe.Pointer, i int) archsimd.Float64x8 {
	return load8(p, i).ConvertToFloat64()
}

// load8d returns the eight float64s at p[i:].
func load8d(p unsafe.Pointer, i int) archsimd.Float64x8 {
	return archsimd.LoadFloat64x8((*[8]float64)(unsafe.Add(p, 8*i)))
}

// store8d writes v to p[i:i+8].
func store8d(v archsimd.Float64x8, p unsafe.Pointer, i int) {
	v.Store((*[8]float64)(unsafe.Add(p, 8*i)))
}

// sumsRow2x512 is sumsRow2x32 eight channels at a time.
func sumsRow2x512(n int, dy0, x0 unsafe.Pointer, W int, mean, a, b unsafe.Pointer) {
	dy1, x1 := unsafe.Add(dy0, 4*W), unsafe.Add(x0, 4*W)
	for j := 0; j < n; j += 8 {
		mu := load8d(mean, j)
		g0, g1 := widen8(dy0, j), widen8(dy1, j)
		xc0, xc1 := widen8(x0, j).Sub(mu), widen8(x1, j).Sub(mu)
		store8d(load8d(a, j).Add(g0.Add(g1)), a, j)
		store8d(g1.MulAdd(xc1, g0.MulAdd(xc0, load8d(b, j))), b, j)
	}
	archsimd.ClearAVXUpperBits()
}

// sumsRow512 is sumsRow32 eight channels at a time.
func sumsRow512(n int, dy, x unsafe.Pointer, _ int, mean, a, b unsafe.Pointer) {
	for j := 0; j < n; j += 8 {
		g := widen8(dy, j)
		xc := widen8(x, j).Sub(load8d(mean, j))
		store8d(load8d(a, j).Add(g), a, j)
		store8d(g.MulAdd(xc, load8d(b, j)), b, j)
	}
	archsimd.ClearAVXUpperBits()
}

// runSums512 is runSums32 sixteen elements at a time.
func runSums512(dy, x []float32, mu float64) (sumDy, sumDyXc float64) {
	m := len(dy)
	needLen(m, x)
	j := 0
	if m >= 16 {
		pdy, px := ptr32(dy), ptr32(x)
		mu8 := archsimd.BroadcastFloat64x8(mu)
		var a0, a1, b0, b1 archsimd.Float64x8
		for ; j+16 <= m; j += 16 {
			g0, g1 := widen8(pdy, j), widen8(pdy, j+8)
			x0, x1 := widen8(px, j).Sub(mu8), widen8(px, j+8).Sub(mu8)
			a0, a1 = a0.Add(g0), a1.Add(g1)
			b0, b1 = g0.MulAdd(x0, b0), g1.MulAdd(x1, b1)
		}
		a, b := a0.Add(a1), b0.Add(b1)
		var la, lb [4]float64
		a.GetLo().Add(a.GetHi()).Store(&la)
		b.GetLo().Add(b.GetHi()).Store(&lb)
		archsimd.ClearAVXUpperBits()
		sumDy = (la[0] + la[1]) + (la[2] + la[3])
		sumDyXc = (lb[0] + lb[1]) + (lb[2] + lb[3])
	}
	s, sx := runSums32(dy[j:], x[j:], mu)
	return sumDy + s, sumDyXc + sx
}

// applyRow512 is applyRow32 sixteen channels at a time.
func applyRow512(n int, dy, x, dx unsafe.Pointer, _ int, a, b, mdy, mu unsafe.Pointer) {
	for j := 0; j < n; j += 16 {
		r := load16(x, j).Sub(load16(mu, j)).Mul(load16(b, j))
		store16(load16(dy, j).Sub(load16(mdy, j)).MulAdd(load16(a, j), r), dx, j)
	}
	archsimd.ClearAVXUpperBits()
}

// applyRow2x512 is applyRow2x32 sixteen channels at a time.
func applyRow2x512(n int, dy, x, dx unsafe.Pointer, W int, a, b, mdy, mu unsafe.Pointer) {
	dy1, x1, dx1 := unsafe.Add(dy, 4*W), unsafe.Add(x, 4*W), unsafe.Add(dx, 4*W)
	for j := 0; j < n; j += 16 {
		av, bv, dv, mv := load16(a, j), load16(b, j), load16(mdy, j), load16(mu, j)
		store16(load16(dy, j).Sub(dv).MulAdd(av, load16(x, j).Sub(mv).Mul(bv)), dx, j)
		store16(load16(dy1, j).Sub(dv).MulAdd(av, load16(x1, j).Sub(mv).Mul(bv)), dx1, j)
	}
	archsimd.ClearAVXUpperBits()
}

// scaleRow512 is scaleRow32 sixteen channels at a time.
func scaleRow512(n int, dy, dx, a unsafe.Pointer) {
	for j := 0; j < n; j += 16 {
		store16(load16(dy, j).Mul(load16(a, j)), dx, j)
	}
	archsimd.ClearAVXUpperBits()
}

// applyRun512 is applyRun32 sixteen elements at a time.
func applyRun512(scaleOnly bool, a, b, mdy, mu float32, dy, x, dx []float32) {
	m := len(dy)
	needLen(m, x, dx)
	pdy, px, pdx := ptr32(dy), ptr32(x), ptr32(dx)
	j := 0
	a16 := archsimd.BroadcastFloat32x16(a)
	if scaleOnly {
		for ; j+16 <= m; j += 16 {
			store16(load16(pdy, j).Mul(a16), pdx, j)
		}
	} else {
		b16, mdy16, mu16 := archsimd.BroadcastFloat32x16(b), archsimd.BroadcastFloat32x16(mdy), archsimd.BroadcastFloat32x16(mu)
		for ; j+16 <= m; j += 16 {
			r := load16(px, j).Sub(mu16).Mul(b16)
			store16(load16(pdy, j).Sub(mdy16).MulAdd(a16, r), pdx, j)
		}
	}
	archsimd.ClearAVXUpperBits()
	applyRun32(scaleOnly, a, b, mdy, mu, dy[j:], x[j:], dx[j:])
}

// mean16 returns the sixteen float64 means at p[i:] rounded to float32 (the
// means are float32 inputs, so the rounding is exact).
func mean16(p unsafe.Pointer, i int) archsimd.Float32x16 {
	var v archsimd.Float32x16
	return v.SetLo(load8d(p, i).ConvertToFloat32()).SetHi(load8d(p, i+8).ConvertToFloat32())
}

// fold16 adds the sixteen float32 partial sums v into the float64
// accumulators at p[i:].
func fold16(v archsimd.Float32x16, p unsafe.Pointer, i int) {
	store8d(load8d(p, i).Add(v.GetLo().ConvertToFloat64()), p, i)
	store8d(load8d(p, i+8).Add(v.GetHi().ConvertToFloat64()), p, i+8)
}

// sumsTile512 is sumsTile32 for 64 channels, in four vectors of sixteen:
// its loop is sumsTileRows512 (tile_amd64.s).
func sumsTile512(rows, W int, dy, x, mean, a, b unsafe.Pointer) {
	var mu [64]float32
	pm := unsafe.Pointer(&mu)
	for i := 0; i < 64; i += 16 {
		store16(mean16(mean, i), pm, i)
	}
	sumsTileRows512(rows, W, dy, x, pm, a, b)
	archsimd.ClearAVXUpperBits()
}

// sumsTileRows512 is sumsTile512's loop over the rows (tile_amd64.s).
//
//go:noescape
func sumsTileRows512(rows, W int, dy, x, mean, a, b unsafe.Pointer)

// sumsTile1x512 is sumsTile512 for sixteen channels.
func sumsTile1x512(rows, W int, dy, x, mean, a, b unsafe.Pointer) {
	m := mean16(mean, 0)
	o := 0 // the row's offset: no pointer past the last row is formed
	for rows > 0 {
		k := min(rows, foldRows)
		rows -= k
		var sa, sb archsimd.Float32x16
		for ; k > 0; k-- {
			g := load16(dy, o)
			sa = sa.Add(g)
			sb = g.MulAdd(load16(x, o).Sub(m), sb)
			o += W
		}
		fold16(sa, a, 0)
		fold16(sb, b, 0)
	}
	archsimd.ClearAVXUpperBits()
}

// widenBFloat16x16 is widenBFloat16 sixteen at a time.
func widenBFloat16x16(dst []float32, src []BFloat16) {
	n := len(src)
	dst = dst[:n]
	ps, pd := unsafe.Pointer(unsafe.SliceData(src)), ptr32(dst)
	j := 0
	for ; j+16 <= n; j += 16 {
		u := archsimd.LoadUint16x16((*[16]uint16)(unsafe.Add(ps, 2*j)))
		store16(u.ExtendToUint32().ShiftAllLeft(16).AsFloat32x16(), pd, j)
	}
	archsimd.ClearAVXUpperBits()
	widenBFloat16(dst[j:], src[j:])
}

// narrowBFloat16x16 is narrowBFloat16 sixteen at a time.
func narrowBFloat16x16(dst []BFloat16, src []float32) {
	n := len(src)
	dst = dst[:n]
	ps, pd := ptr32(src), unsafe.Pointer(unsafe.SliceData(dst))
	absMask, inf := archsimd.BroadcastUint32x16(0x7fffffff), archsimd.BroadcastInt32x16(0x7f800000)
	bias, one, quiet := archsimd.BroadcastUint32x16(0x7fff), archsimd.BroadcastUint32x16(1), archsimd.BroadcastUint32x16(0x40)
	by16 := archsimd.BroadcastUint32x16(16) // a vector count, as in narrowBFloat16
	j := 0
	for ; j+16 <= n; j += 16 {
		u := load16(ps, j).AsUint32x16()
		isNaN := u.And(absMask).AsInt32x16().Greater(inf)
		hi := u.ShiftRight(by16)
		rounded := u.Add(bias).Add(hi.And(one)).ShiftRight(by16)
		hi.Or(quiet).Merge(rounded, isNaN).TruncateToUint16().Store((*[16]uint16)(unsafe.Add(pd, 2*j)))
	}
	archsimd.ClearAVXUpperBits()
	narrowBFloat16(dst[j:], src[j:])
}

// The channels-last bfloat16 loops, which read and write bfloat16 in the
// vector loops themselves instead of through float32 blocks (forBlocks):
// the widening is a shift, and a block converted to memory and read back
// costs more than the arithmetic. Each computes exactly what the float32
// loops compute on the widened block, and rounds dx as narrowBFloat16.

// wideBF16 returns the sixteen bfloat16s at p[i:] as float32s.
func wideBF16(p unsafe.Pointer, i int) archsimd.Float32x16 {
	return archsimd.LoadUint16x16((*[16]uint16)(unsafe.Add(p, 2*i))).ExtendToUint32().ShiftAllLeft(16).AsFloat32x16()
}

// sumsTileBF16 is sumsTile512 over bfloat16 rows: its loop is
// sumsTileRowsBF16 (tile_amd64.s), which loads 32 channels at a time and
// widens them by interleaving their 16-bit halves with zeros within each
// 128-bit lane, two instructions for 32 channels where a cross-lane
// widening took one for 16. The low vector then holds channels 0-3, 8-11,
// 16-19 and 24-27 of the 32, the high one the others (lanePos); the means
// are laid out the same way, and the sums are put back in channel order as
// they are folded. Each channel's float32 sums are those of widening in
// order (wideBF16), bit for bit.
func sumsTileBF16(rows, W int, dy, x, mean, a, b unsafe.Pointer) {
	var mu [64]float32
	for c := range 64 {
		mu[c&^31+lanePos(c&31)] = float32(*(*float64)(unsafe.Add(mean, 8*c)))
	}
	sumsTileRowsBF16(rows, W, dy, x, unsafe.Pointer(&mu), a, b, unsafe.Pointer(&laneIndex))
	archsimd.ClearAVXUpperBits()
}

// sumsTileRowsBF16 is sumsTileBF16's loop over the rows (tile_amd64.s);
// order is laneIndex.
//
//go:noescape
func sumsTileRowsBF16(rows, W int, dy, x, mean, a, b, order unsafe.Pointer)

// lanePos returns where channel c (< 32) of 32 loaded together lands in the
// pair of vectors that interleaving with zeros widens them into: the low
// one (positions 0-15) or the high one (16-31).
func lanePos(c int) int {
	pos := 4*(c/8) + c%4
	if c%8 >= 4 {
		pos += 16
	}
	return pos
}

// laneIndex holds, for channels 0-15 and then 16-31 of 32 widened by
// interleaving, their positions in the pair of vectors (lanePos): the
// indices of the VPERMI2PS that puts them back in order.
var laneIndex = func() (ix [32]uint32) {
	for c := range ix {
		ix[c] = uint32(lanePos(c))
	}
	return ix
}()

// sumsTile1BF16 is sumsTileBF16 for sixteen channels.
func sumsTile1BF16(rows, W int, dy, x, mean, a, b unsafe.Pointer) {
	m := mean16(mean, 0)
	o := 0 // the row's offset: no pointer past the last row is formed
	for rows > 0 {
		k := min(rows, foldRows)
		rows -= k
		var sa, sb archsimd.Float32x16
		for ; k > 0; k-- {
			g := wideBF16(dy, o)
			sa = sa.Add(g)
			sb = g.MulAdd(wideBF16(x, o).Sub(m), sb)
			o += W
		}
		fold16(sa, a, 0)
		fold16(sb, b, 0)
	}
	archsimd.ClearAVXUpperBits()
}

// sumsRowsBF16 is sumsTiles over whole rows of L channels of bfloat16, L a
// multiple of sixteen.
func sumsRowsBF16(L int, dy, x []BFloat16, mean, a, b []float64) {
	rows := len(dy) / L
	if len(x) < L*rows {
		panic("kernels: slice shorter than the loop")
	}
	needLen(L, mean, a, b)
	pdy, px := unsafe.Pointer(unsafe.SliceData(dy)), unsafe.Pointer(unsafe.SliceData(x))
	c := 0
	for ; c+64 <= L; c += 64 {
		sumsTileBF16(rows, L, unsafe.Add(pdy, 2*c), unsafe.Add(px, 2*c), unsafe.Pointer(&mean[c]), unsafe.Pointer(&a[c]), unsafe.Pointer(&b[c]))
	}
	for ; c < L; c += 16 {
		sumsTile1BF16(rows, L, unsafe.Add(pdy, 2*c), unsafe.Add(px, 2*c), unsafe.Pointer(&mean[c]), unsafe.Pointer(&a[c]), unsafe.Pointer(&b[c]))
	}
}

// applyRowsBF16 writes dx over whole rows of L channels of bfloat16, L a
// multiple of sixteen, as applyRow512 on the widened rows and
// narrowBFloat16 on the result.
func applyRowsBF16(L int, t *affine32, dy, x, dx []BFloat16) {
	n := len(dy) / L * L
	if len(x) < n || len(dx) < n {
		panic("kernels: slice shorter than the loop")
	}
	needLen(L, t.A, t.B, t.MeanDy, t.Mean)
	pdy, px, pdx := unsafe.Pointer(unsafe.SliceData(dy)), unsafe.Pointer(unsafe.SliceData(x)), unsafe.Pointer(unsafe.SliceData(dx))
	pa, pb, pd, pm := ptr32(t.A), ptr32(t.B), ptr32(t.MeanDy), ptr32(t.Mean)
	if avx512BF16 && L%32 == 0 {
		if t.ScaleOnly {
			px = nil // the loop's scale-only form
		}
		applyRowsBF16x32(n/L, L, pdy, px, pdx, pa, pb, pd, pm)
		return
	}
	absMask, inf := archsimd.BroadcastUint32x16(0x7fffffff), archsimd.BroadcastInt32x16(0x7f800000)
	bias, one, quiet := archsimd.BroadcastUint32x16(0x7fff), archsimd.BroadcastUint32x16(1), archsimd.BroadcastUint32x16(0x40)
	by16 := archsimd.BroadcastUint32x16(16)
	for o := 0; o < n; o += L {
		for j := 0; j < L; j += 16 {
			var v archsimd.Float32x16
			if t.ScaleOnly {
				v = wideBF16(pdy, o+j).Mul(load16(pa, j))
			} else {
				r := wideBF16(px, o+j).Sub(load16(pm, j)).Mul(load16(pb, j))
				v = wideBF16(pdy, o+j).Sub(load16(pd, j)).MulAdd(load16(pa, j), r)
			}
			u := v.AsUint32x16()
			isNaN := u.And(absMask).AsInt32x16().Greater(inf)
			hi := u.ShiftRight(by16)
			rounded := u.Add(bias).Add(hi.And(one)).ShiftRight(by16)
			hi.Or(quiet).Merge(rounded, isNaN).TruncateToUint16().Store((*[16]uint16)(unsafe.Add(pdx, 2*(o+j))))
		}
	}
	archsimd.ClearAVXUpperBits()
}

// avx512BF16 reports whether the CPU has AVX512_BF16, for the bfloat16
// apply loops of bf16_amd64.s (applyRowsBF16).
var avx512BF16 = canAVX512() && hasAVX512BF16()

// hasAVX512BF16 reports whether the CPU has AVX512_BF16 (bf16_amd64.s); only
// a CPU with AVX-512 may call it.
func hasAVX512BF16() bool

// applyRowsBF16x32 is applyRowsBF16's loop with AVX512_BF16
// (bf16_amd64.s), for L a multiple of 32; x nil selects the scale-only
// form.
//
//go:noescape
func applyRowsBF16x32(rows, L int, dy, x, dx, a, b, mdy, mu unsafe.Pointer)
