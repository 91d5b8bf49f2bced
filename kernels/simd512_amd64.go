//go:build goexperiment.simd && amd64

package kernels

import (
	"simd/archsimd"
	"unsafe"
)

// The AVX-512 forms of the float32 row and run loops of simd_amd64.go: the
// same arithmetic on vectors twice as wide, which halves the instructions
// per element where the AVX2 loops are limited by them rather than by
// memory (channels-last sums keep their accumulators in memory). Those
// written once in the lane constants are generated (simd512_gen_amd64.go,
// cmd/gensimd); this file has the vocabulary they call at this width
// and the loops of this width alone.

// The vector lengths of the AVX-512 loops, in float32 and in float64 lanes.
const (
	f32Lanes512 = 2 * f32Lanes
	f64Lanes512 = 2 * f64Lanes
)

// widen8 returns the eight float32s at p[i:] as float64s.
func widen8(p unsafe.Pointer, i int) archsimd.Float64x8 {
	return load8(p, i).ConvertToFloat64()
}

// laneNumbers512 is laneNumbers at this width.
var laneNumbers512 = [f32Lanes512]int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}

// broadcastAt16 is broadcastAt8 on AVX-512 vectors.
func broadcastAt16(p unsafe.Pointer, c int) archsimd.Float32x16 {
	return archsimd.LoadFloat32x4((*[4]float32)(unsafe.Add(p, 4*c))).Broadcast1To16()
}

// loadMasked16 loads the elements of the sixteen at p[i:] that mask m
// selects, and zeros for the others, which it does not read: the vector may
// reach past the end of the allocation, which masked lanes never fault on,
// but which checkptr (go test -race) reports as a conversion straddling
// two allocations. archsimd.LoadFloat32x16SlicePart makes the same
// conversion, checked.
//
//go:nocheckptr
func loadMasked16(p unsafe.Pointer, i int, m archsimd.Mask32x16) archsimd.Float32x16 {
	return archsimd.LoadMaskedFloat32x16((*[f32Lanes512]float32)(unsafe.Add(p, 4*i)), m)
}

// storeMasked16 is storeMasked8 on AVX-512 vectors.
//
//go:nocheckptr
func storeMasked16(v archsimd.Float32x16, p unsafe.Pointer, i int, m archsimd.Mask32x16) {
	v.StoreMasked((*[f32Lanes512]float32)(unsafe.Add(p, 4*i)), m)
}

// maskFromBits16 is maskFromBits8 at this width: the low sixteen bits.
func maskFromBits16(w uint64) archsimd.Mask32x16 { return archsimd.Mask32x16FromBits(uint16(w)) }

// sumsPlaneLanesRuns512 and applyPlanesRuns512 are the runs' loops of
// sumsPlaneLanes512 and applyPlanes512 (planes_amd64.s), which the plane
// paths call through sumsPlaneLanesAsm512 and applyPlanesAsm512.
//
//go:noescape
func sumsPlaneLanesRuns512(n, C, S, c, pos int, dy, x, mean, lanes unsafe.Pointer)

//go:noescape
func applyPlanesRuns512(n, C, S, c, pos int, dy, x, dx, a, b, mdy, mu unsafe.Pointer, scaleOnly bool)

// sumsPlaneLanesReluRuns512 and sumsPlaneLanesRelu6Runs512 are
// sumsPlaneLanesRuns512 of FusedBatchNormGradEx's dz = dy·m, m formed from y
// where dy is loaded; applyPlanesReluRuns512 and applyPlanesRelu6Runs512
// applyPlanesRuns512's (not scale-only) (planes_amd64.s).
//
//go:noescape
func sumsPlaneLanesReluRuns512(n, C, S, c, pos int, dy, x, mean, lanes, y unsafe.Pointer)

//go:noescape
func sumsPlaneLanesRelu6Runs512(n, C, S, c, pos int, dy, x, mean, lanes, y unsafe.Pointer)

//go:noescape
func applyPlanesReluRuns512(n, C, S, c, pos int, dy, x, dx, a, b, mdy, mu, y unsafe.Pointer)

//go:noescape
func applyPlanesRelu6Runs512(n, C, S, c, pos int, dy, x, dx, a, b, mdy, mu, y unsafe.Pointer)

// sumsPlaneLanesMask512 is sumsPlaneLanesAsm512 of dz = dy·m, m the Relu's
// (upper: Relu6's) from y.
func sumsPlaneLanesMask512(C, S, off int, dy, x, y, mean []float32, lanes []float64, upper bool) {
	n := len(x)
	if n == 0 {
		return
	}
	needLen(n, dy, y)
	needLen(C+meanPad, mean)
	needLen(planeLanes*C, lanes)
	loop := sumsPlaneLanesReluRuns512
	if upper {
		loop = sumsPlaneLanesRelu6Runs512
	}
	loop(n, C, S, off/S%C, off%S, ptr32(dy), ptr32(x), ptr32(mean), ptr64(lanes), ptr32(y))
}

// applyPlanesMask512 is applyPlanesAsm512 of dz = dy·m, m the Relu's
// (upper: Relu6's) from y; t is not scale-only.
func applyPlanesMask512(C, S, c, pos int, t *affine32, dy, x, y, dx []float32, upper bool) {
	n := len(x)
	if n == 0 {
		return
	}
	if t.ScaleOnly {
		panic("kernels: the masked plane loops have no scale-only form")
	}
	needLen(n, dy, y, dx)
	needLen(C, t.A, t.B, t.MeanDy, t.Mean)
	loop := applyPlanesReluRuns512
	if upper {
		loop = applyPlanesRelu6Runs512
	}
	loop(n, C, S, c, pos, ptr32(dy), ptr32(x), ptr32(dx), ptr32(t.A), ptr32(t.B), ptr32(t.MeanDy), ptr32(t.Mean), ptr32(y))
}

// hasBMI2 reports whether the CPU has BMI2, which the assembly plane loops
// use (planes_amd64.s); without it the archsimd forms run.
func hasBMI2() bool

// planesInAsm: the AVX-512 plane loops in assembly.
var planesInAsm = hasBMI2()

// sumsPlaneLanesAsm512 is sumsPlaneLanes512, its loop in assembly.
func sumsPlaneLanesAsm512(C, S, off int, dy, x, mean []float32, lanes []float64) {
	n := len(x)
	if n == 0 {
		return
	}
	needLen(n, dy)
	needLen(C+meanPad, mean)
	needLen(planeLanes*C, lanes)
	sumsPlaneLanesRuns512(n, C, S, off/S%C, off%S, ptr32(dy), ptr32(x), ptr32(mean), ptr64(lanes))
}

// sumsPlaneLanesBF16Runs512 and applyPlanesBF16Runs512 are the runs' loops
// of sumsPlaneLanesBF16x16 and applyPlanesBF16x16 (planes_bf16_amd64.s),
// which the bfloat16 plane paths call through sumsPlaneLanesBF16Asm512 and
// applyPlanesBF16Asm512.
//
//go:noescape
func sumsPlaneLanesBF16Runs512(n, C, S, c, pos int, dy, x, mean, lanes unsafe.Pointer)

//go:noescape
func applyPlanesBF16Runs512(n, C, S, c, pos int, dy, x, dx, a, b, mdy, mu unsafe.Pointer, scaleOnly bool)

// sumsPlaneLanesBF16Asm512 is sumsPlaneLanesBF16x16, its loop in assembly.
func sumsPlaneLanesBF16Asm512(C, S, off int, dy, x []BFloat16, mean []float32, lanes []float64) {
	n := len(x)
	if n == 0 {
		return
	}
	needLen(n, dy)
	needLen(C+meanPad, mean)
	needLen(planeLanes*C, lanes)
	sumsPlaneLanesBF16Runs512(n, C, S, off/S%C, off%S, ptrBF16(dy), ptrBF16(x), ptr32(mean), ptr64(lanes))
}

// applyPlanesBF16Asm512 is applyPlanesBF16x16, its loop in assembly.
func applyPlanesBF16Asm512(C, S, c, pos int, t *affine32, dy, x, dx []BFloat16) {
	n := len(x)
	if n == 0 {
		return
	}
	needLen(n, dy, dx)
	needLen(C, t.A, t.B, t.MeanDy, t.Mean)
	applyPlanesBF16Runs512(n, C, S, c, pos, ptrBF16(dy), ptrBF16(x), ptrBF16(dx), ptr32(t.A), ptr32(t.B), ptr32(t.MeanDy), ptr32(t.Mean), t.ScaleOnly)
}

func ptrBF16(s []BFloat16) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(s)) }

// applyPlanesAsm512 is applyPlanes512, its loop in assembly.
func applyPlanesAsm512(C, S, c, pos int, t *affine32, dy, x, dx []float32) {
	n := len(x)
	if n == 0 {
		return
	}
	needLen(n, dy, dx)
	needLen(C, t.A, t.B, t.MeanDy, t.Mean)
	applyPlanesRuns512(n, C, S, c, pos, ptr32(dy), ptr32(x), ptr32(dx), ptr32(t.A), ptr32(t.B), ptr32(t.MeanDy), ptr32(t.Mean), t.ScaleOnly)
}

// sumsTileMaskRows512 and sumsTileMask1Rows512 are sumsTileMask32 for 64
// channels and sumsTileMask1x32 for sixteen on AVX-512 vectors, the means
// rounded to float32 by the caller; applyRowsMask512 is applyRowsMask32
// (mask_amd64.s). In archsimd, the compiler kept their masks in vectors.
//
//go:noescape
func sumsTileMaskRows512(rows, W int, dy, x, y, mean, a, b, bits unsafe.Pointer, upper bool)

//go:noescape
func sumsTileMask1Rows512(rows, W int, dy, x, y, mean, a, b, bits unsafe.Pointer, upper bool)

//go:noescape
func applyRowsMask512(rows, n, W int, dy, x, dx, bits, a, b, mdy, mu unsafe.Pointer, stream bool)

// sumsTileMaskAsm512 is sumsTileMask32 for 64 channels on AVX-512 vectors.
func sumsTileMaskAsm512(rows, W int, dy, x, y, mean, a, b, bits unsafe.Pointer, upper bool) {
	var mu [64]float32
	pm := unsafe.Pointer(&mu)
	for i := 0; i < 64; i += 16 {
		store16(mean16(mean, i), pm, i)
	}
	sumsTileMaskRows512(rows, W, dy, x, y, pm, a, b, bits, upper)
	archsimd.ClearAVXUpperBits()
}

// sumsTileMask1Asm512 is sumsTileMask1x32 for sixteen channels.
func sumsTileMask1Asm512(rows, W int, dy, x, y, mean, a, b, bits unsafe.Pointer, upper bool) {
	var mu [16]float32
	pm := unsafe.Pointer(&mu)
	store16(mean16(mean, 0), pm, 0)
	sumsTileMask1Rows512(rows, W, dy, x, y, pm, a, b, bits, upper)
	archsimd.ClearAVXUpperBits()
}

// quad512 returns v's two halves added, as four lanes to add up.
func quad512(v archsimd.Float64x8) archsimd.Float64x4 { return v.GetLo().Add(v.GetHi()) }

// runSumsTail512 adds the sums of a run's tail, under sixteen elements, to
// the run's sums so far, formed apart as the AVX2 loop forms a run's: a
// step of its vectors where the tail has eight elements or more, then the
// scalar tail. Written out without further calls: the plane loops call it
// once a run (too large for Go to inline, it stays one call).
func runSumsTail512(dy, x []float32, mu, sumDy, sumDyXc float64) (float64, float64) {
	var s, sx float64
	j := 0
	if len(dy) >= 2*f64Lanes {
		_ = x[2*f64Lanes-1]
		pdy, px := ptr32(dy), ptr32(x)
		muv := archsimd.BroadcastFloat64x4(mu)
		zero := load4d(unsafe.Pointer(&runZeros), 0)
		g0, g1 := widen4(pdy, 0), widen4(pdy, f64Lanes)
		x0, x1 := widen4(px, 0).Sub(muv), widen4(px, f64Lanes).Sub(muv)
		var la, lb [4]float64
		zero.Add(g0).Add(zero.Add(g1)).Store(&la)
		g0.MulAdd(x0, zero).Add(g1.MulAdd(x1, zero)).Store(&lb)
		archsimd.ClearAVXUpperBits()
		s = (la[0] + la[1]) + (la[2] + la[3])
		sx = (lb[0] + lb[1]) + (lb[2] + lb[3])
		j = 2 * f64Lanes
	}
	s, sx = runSumsTail(dy[j:], x[j:], mu, s, sx)
	return sumDy + s, sumDyXc + sx
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

// storeBF16x16 is storeBF16x8 for sixteen lanes, with the narrowing store
// AVX-512 has.
func storeBF16x16(v archsimd.Uint32x16, p unsafe.Pointer, i int) {
	v.TruncateToUint16().Store((*[f32Lanes512]uint16)(unsafe.Add(p, 2*i)))
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
			storeBF16x16(hi.Or(quiet).Merge(rounded, isNaN), pdx, o+j)
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

// bf16Round16 is bf16Round8 at this width, set where the CPU has AVX-512.
var bf16Round16 bf16Rounding16

// bf16Rounding16 is bf16Rounding8 on AVX-512 vectors.
type bf16Rounding16 struct {
	abs, bias, one, quiet, by16 archsimd.Uint32x16
	inf                         archsimd.Int32x16
}

// maskRowsBF16 is maskGrad over bfloat16, sixteen elements at a time: dz
// = dy·m of FusedBatchNormGradEx's bfloat16 rows, which the bfloat16 row
// loops then read as dy (simdSumsBFloat16, simdApplyBFloat16). m is taken
// from the widened y and dy·m computed in float32, as maskRows512 does it,
// then narrowed by truncation, which is exact: dy·1 is dy, dy·0 a signed
// zero or a quiet NaN, each a bfloat16 value as float32 (a NaN's quiet bit
// is one of its upper sixteen). Where bits is not nil, element j's bit is
// written at bit pos+j of bits, the bits below pos in its word kept. pos
// and len(dz) are multiples of sixteen.
func maskRowsBF16(dz, dy, y []BFloat16, upper bool, bits []uint64, pos int) {
	n := len(dz)
	if n%f32Lanes512 != 0 || pos%f32Lanes512 != 0 || len(dy) < n || len(y) < n {
		panic("kernels: bfloat16 mask rows off their vectors")
	}
	if bits != nil && len(bits) < (pos+n+63)/64 {
		panic("kernels: mask bits shorter than the loop")
	}
	pz, pd, py := unsafe.Pointer(unsafe.SliceData(dz)), unsafe.Pointer(unsafe.SliceData(dy)), unsafe.Pointer(unsafe.SliceData(y))
	zero, six, one := archsimd.BroadcastFloat32x16(0), archsimd.BroadcastFloat32x16(6), archsimd.BroadcastFloat32x16(1)
	by16 := archsimd.BroadcastUint32x16(16) // a shift by a vector: by a constant, the compiler loads the count with an SSE move
	var word uint64
	for j := 0; j < n; j += f32Lanes512 {
		v := wideBF16(py, j)
		on := v.Greater(zero)
		if upper {
			on = on.And(v.Less(six))
		}
		storeBF16x16(wideBF16(pd, j).Mul(one.Masked(on)).AsUint32x16().ShiftRight(by16), pz, j)
		if bits == nil {
			continue
		}
		p := pos + j
		if j == 0 {
			word = bits[p/64] & (1<<(p%64) - 1)
		}
		word |= uint64(on.ToBits()) << (p % 64)
		if p%64 == 64-f32Lanes512 || j+f32Lanes512 == n {
			bits[p/64], word = word, 0
		}
	}
	archsimd.ClearAVXUpperBits()
}

// unmaskRowsBF16 is unmaskGrad over bfloat16, sixteen elements at a time:
// dz = dy·m, m's bits from bit pos of bits on, dy·m as maskRowsBF16
// computes it. pos and len(dz) are multiples of sixteen.
func unmaskRowsBF16(dz, dy []BFloat16, bits []uint64, pos int) {
	n := len(dz)
	if n%f32Lanes512 != 0 || pos%f32Lanes512 != 0 || len(dy) < n {
		panic("kernels: bfloat16 mask rows off their vectors")
	}
	if len(bits) < (pos+n+63)/64 {
		panic("kernels: mask bits shorter than the loop")
	}
	pz, pd := unsafe.Pointer(unsafe.SliceData(dz)), unsafe.Pointer(unsafe.SliceData(dy))
	one, by16 := archsimd.BroadcastFloat32x16(1), archsimd.BroadcastUint32x16(16)
	for j := 0; j < n; j += f32Lanes512 {
		p := pos + j
		m := maskFromBits16(bits[p/64] >> (p % 64))
		storeBF16x16(wideBF16(pd, j).Mul(one.Masked(m)).AsUint32x16().ShiftRight(by16), pz, j)
	}
	archsimd.ClearAVXUpperBits()
}

// sumsChannelLanesRuns512 sums a by-channel unit's float32 planes channel
// by channel (planes_amd64.s).
//
//go:noescape
func sumsChannelLanesRuns512(N, stride, S, c0, c1 int, dy, x, mean, lanes unsafe.Pointer)

// sumsChannelLanesAsm512 adds channels [c0, c1)'s sums over the N samples
// of dy and x (channels first, C channels of S elements) into their
// float64 lanes, channel by channel (sumsChannelLanesRuns512).
func sumsChannelLanesAsm512(N, C, S, c0, c1 int, dy, x, mean []float32, lanes []float64) {
	if c0 >= c1 || N == 0 || S == 0 {
		return
	}
	needLen(N*C*S, dy, x)
	needLen(C+meanPad, mean)
	needLen(planeLanes*C, lanes)
	sumsChannelLanesRuns512(N, C*S, S, c0, c1, ptr32(dy), ptr32(x), ptr32(mean), ptr64(lanes))
}
