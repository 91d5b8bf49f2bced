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
