//go:build goexperiment.simd && amd64

package kernels

import (
	"simd/archsimd"
	"unsafe"
)

// The AVX2+FMA loops for float32 tensors. Each one must equal the portable
// loop named in its comment up to floating-point rounding: the sums are
// formed in float64 exactly as there; x_backprop is formed in float32 with
// FMA (the portable loop uses float64), which stays within a few float32 ulps.

// Every vector loop ends with archsimd.ClearAVXUpperBits (VZEROUPPER) before
// scalar code runs: Go compiles float32 and float64 arithmetic to legacy-SSE
// instructions, and on Intel CPUs each one that runs while the upper half of
// a vector register is dirty waits on an AVX/SSE state transition. C
// compilers emit the instruction at every such exit; Go 1.26 leaves it to
// the program. Without it, channels-first runs with a scalar tail (e.g. 49
// elements) slow down several times on such CPUs (go test -bench
// 'TrainingGrad$/float32/ChannelsFirst' shows it; TestVectorLoopsClearUpperHalves
// checks every loop).

// rowLoops are the inner loops over one or two channels-last rows, for one
// vector width: the sums take sumStep channels a step, the others applyStep,
// up to the last whole step of a row (sumsRows and applyRows do the tails).
type rowLoops struct {
	sumStep, applyStep int
	sums, sums2        func(n int, dy, x unsafe.Pointer, W int, mean, a, b unsafe.Pointer)
	// The sums over tiles of rows (sumsTiles): tile takes tileStep
	// channels, tile1 one vector's.
	tileStep      int
	tile, tile1   func(rows, W int, dy, x, mean, a, b unsafe.Pointer)
	apply, apply2 func(n int, dy, x, dx unsafe.Pointer, W int, a, b, mdy, mu unsafe.Pointer)
	scale         func(n int, dy, dx, a unsafe.Pointer)
}

var (
	avx2Rows   = &rowLoops{f64Lanes, f32Lanes, sumsRow32, sumsRow2x32, 32, sumsTile32, sumsTile1x32, applyRow32, applyRow2x32, scaleRow32}
	avx512Rows = &rowLoops{f64Lanes512, f32Lanes512, sumsRow512, sumsRow2x512, 64, sumsTile512, sumsTile1x512, applyRow512, applyRow2x512, scaleRow512}
)

// The row and plane loops the float32 paths call: the AVX2 ones, or their
// AVX-512 forms (simd512_amd64.go) where the CPU has AVX-512.
var (
	rowLoopsInUse = avx2Rows
	sumsPlanes    = sumsPlanes32
	applyPlanes   = applyPlanes32
)

// canAVX512 reports whether the CPU can run the AVX-512 loops.
func canAVX512() bool { return archsimd.X86.AVX512() }

// selectLoops selects the AVX-512 loops (wide) or the AVX2 ones.
func selectLoops(wide bool) {
	if wide {
		rowLoopsInUse, sumsPlanes, applyPlanes = avx512Rows, sumsPlanes512, applyPlanes512
		simdWidenBFloat16, simdNarrowBFloat16 = widenBFloat16x16, narrowBFloat16x16
		simdSumsBFloat16, simdApplyBFloat16 = sumsRowsBF16, applyRowsBF16
		simdMaskRowsBFloat16, simdUnmaskRowsBFloat16 = maskRowsBF16, unmaskRowsBF16
		simdPlaneLanes, simdPlaneLanesBFloat16, simdApplyPlanesBFloat16 = sumsPlaneLanes512, sumsPlaneLanesBF16x16, applyPlanesBF16x16
		simdMaskedPlaneLanes, simdMaskedApplyPlanes, simdChannelLanes = nil, nil, nil
		if planesInAsm {
			applyPlanes, simdPlaneLanes, simdChannelLanes = applyPlanesAsm512, sumsPlaneLanesAsm512, sumsChannelLanesAsm512
			simdPlaneLanesBFloat16, simdApplyPlanesBFloat16 = sumsPlaneLanesBF16Asm512, applyPlanesBF16Asm512
			simdMaskedPlaneLanes, simdMaskedApplyPlanes = sumsPlaneLanesMask512, applyPlanesMask512
		}
		simdMaskRows, simdUnmaskRows, maskedInUse = maskRows512, unmaskRows512, avx512Masked
	} else {
		rowLoopsInUse, sumsPlanes, applyPlanes = avx2Rows, sumsPlanes32, applyPlanes32
		simdWidenBFloat16, simdNarrowBFloat16 = widenBFloat16, narrowBFloat16
		simdSumsBFloat16, simdApplyBFloat16 = nil, nil
		simdMaskRowsBFloat16, simdUnmaskRowsBFloat16 = nil, nil
		simdMaskedPlaneLanes, simdMaskedApplyPlanes, simdChannelLanes = nil, nil, nil
		simdPlaneLanes, simdPlaneLanesBFloat16, simdApplyPlanesBFloat16 = sumsPlaneLanes32, sumsPlaneLanesBF16, applyPlanesBF16
		simdMaskRows, simdUnmaskRows, maskedInUse = maskRows32, unmaskRows32, avx2Masked
	}
}

func init() {
	if !archsimd.X86.AVX2() || !archsimd.X86.FMA() {
		return // the portable loops stay in place
	}
	bf16Round8 = newBF16Rounding8()
	if canAVX512() {
		bf16Round16 = newBF16Rounding16()
	}
	selectLoops(canAVX512())
	simdSums = func(d Dims, off int, dy, x []float32, mean, sumDy, sumDyXc []float64) {
		if d.Layout == ChannelsLast {
			sumsChannelsLast32(int(d.C), off, dy, x, mean, sumDy, sumDyXc)
		} else {
			C, S := int(d.C), int(d.S)
			sumsPlanes(C, S, off/S%C, off%S, dy, x, mean, sumDy, sumDyXc)
		}
	}
	simdApply = func(d Dims, off int, t *affine32, dy, x, dx []float32) {
		if d.Layout == ChannelsLast {
			applyChannelsLast32(int(d.C), off, t, dy, x, dx)
		} else {
			applyChannelsFirst32(int(d.C), int(d.S), off, t, dy, x, dx)
		}
	}
	simdFence = streamFence
	simdMaskedSums, simdMaskedApply = sumsMaskedChannelsLast32, applyMaskedChannelsLast32
	invStdsInVectors = true
	if hasF16C() {
		simdWidenHalf = widenHalf
		simdNarrowHalf = narrowHalf
	}
}

// The loops below check their slice lengths once on entry and then address
// elements by pointer arithmetic: LoadFloat32x8Slice and friends re-slice and
// bounds-check on every load, which costs more than the arithmetic.

func ptr32(s []float32) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(s)) }
func ptr64(s []float64) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(s)) }

// The vector lengths of the AVX2 loops, in float32 and in float64 lanes.
// The loops from load8 to narrowBFloat16 that are written in them are written
// once: cmd/gensimd derives their AVX-512 forms (simd512_gen_amd64.go)
// at twice the lengths.
const (
	f32Lanes = 8
	f64Lanes = 4
)

// load8 returns the eight float32s at p[i:].
func load8(p unsafe.Pointer, i int) archsimd.Float32x8 {
	return archsimd.LoadFloat32x8((*[f32Lanes]float32)(unsafe.Add(p, 4*i)))
}

// store8 writes v to p[i:i+8].
func store8(v archsimd.Float32x8, p unsafe.Pointer, i int) {
	v.Store((*[f32Lanes]float32)(unsafe.Add(p, 4*i)))
}

// widen4 returns the four float32s at p[i:] as float64s.
func widen4(p unsafe.Pointer, i int) archsimd.Float64x4 {
	return archsimd.LoadFloat32x4((*[4]float32)(unsafe.Add(p, 4*i))).ConvertToFloat64()
}

// load4d returns the four float64s at p[i:].
func load4d(p unsafe.Pointer, i int) archsimd.Float64x4 {
	return archsimd.LoadFloat64x4((*[f64Lanes]float64)(unsafe.Add(p, 8*i)))
}

// store4d writes v to p[i:i+4].
func store4d(v archsimd.Float64x4, p unsafe.Pointer, i int) {
	v.Store((*[f64Lanes]float64)(unsafe.Add(p, 8*i)))
}

// quad returns v as four lanes to add up: v itself (its AVX-512 form adds
// the two halves of eight).
func quad(v archsimd.Float64x4) archsimd.Float64x4 { return v }

// needLen panics unless every slice in s has at least n elements.
func needLen[E any](n int, s ...[]E) {
	for _, v := range s {
		if len(v) < n {
			panic("kernels: slice shorter than the loop")
		}
	}
}

// invStdsInVectors has invStdsVector run, where the CPU has AVX2.
var invStdsInVectors bool

// invStdsVector writes 1/sqrt(variance+epsilon) in float64 four at a time
// over the leading multiple of 4 of dst, and returns its length (0 where
// the CPU lacks AVX2). A function rather than a hook like simdSums, so that
// dst may stay on the caller's stack.
func invStdsVector(dst []float64, variance []float32, epsilon float32) int {
	if !invStdsInVectors {
		return 0
	}
	n := len(dst) / 4 * 4
	needLen(n, variance)
	pd, pv := ptr64(dst), ptr32(variance)
	eps, one := archsimd.BroadcastFloat64x4(float64(epsilon)), archsimd.BroadcastFloat64x4(1)
	for i := 0; i < n; i += 4 {
		store4d(one.Div(widen4(pv, i).Add(eps).Sqrt()), pd, i)
	}
	archsimd.ClearAVXUpperBits()
	return n
}

// addVector adds src into dst four float64 at a time over their leading
// multiple of 4 and returns its length (0 where the CPU lacks AVX2): the
// same sums as a scalar loop, faster (fold's partial sums of a wide row).
func addVector(dst, src []float64) int {
	if !invStdsInVectors {
		return 0
	}
	n := len(dst) / 4 * 4
	needLen(n, src)
	pd, ps := ptr64(dst), ptr64(src)
	for i := 0; i < n; i += 4 {
		store4d(load4d(pd, i).Add(load4d(ps, i)), pd, i)
	}
	archsimd.ClearAVXUpperBits()
	return n
}

// rowSpans splits the n elements at flat offset off of a tensor with rows
// of L channels into a partial first row, the whole rows, and a partial last
// row, and calls each(c0, i, W, rows) for each: rows rows of W channels from
// element i, the first of channel c0.
func rowSpans(L, off, n int, each func(c0, i, W, rows int)) {
	i := 0
	if c0 := off % L; c0 != 0 {
		i = min(L-c0, n)
		each(c0, 0, i, 1)
	}
	if rows := (n - i) / L; rows > 0 {
		each(0, i, L, rows)
		i += rows * L
	}
	if i < n {
		each(0, i, n-i, 1)
	}
}

// sumsChannelsLast32 is sumsChannelsLast for float32 over rows of L
// channels.
func sumsChannelsLast32(L, off int, dy, x []float32, mean, sumDy, sumDyXc []float64) {
	rowSpans(L, off, len(x), func(c0, i, W, rows int) {
		sumsRows(W, rows, dy[i:], x[i:], mean[c0:], sumDy[c0:], sumDyXc[c0:])
	})
}

// sumsRows adds rows contiguous rows of W channels into the accumulators a
// (Σdy) and b (Σdy·(x−mean)), which have W elements like mean: in memory
// order (a walk that interleaves rows further apart defeats the hardware
// prefetcher once the data comes from DRAM), two short rows at a time, in
// float64 lanes.
func sumsRows(W, rows int, dy, x []float32, mean, a, b []float64) {
	needLen(W*rows, dy, x)
	needLen(W, mean, a, b)
	l := rowLoopsInUse
	if l.tiles(W, rows) {
		sumsTiles(l, W, rows, dy, x, mean, a, b)
		return
	}
	pm, pa, pb := ptr64(mean), ptr64(a), ptr64(b)
	Wv := W / l.sumStep * l.sumStep
	o := 0
	if W == Wv && W < twoRowMax {
		for ; o+2*W <= W*rows; o += 2 * W {
			l.sums2(Wv, unsafe.Pointer(&dy[o]), unsafe.Pointer(&x[o]), W, pm, pa, pb)
		}
	}
	for ; o < W*rows; o += W {
		l.sums(Wv, unsafe.Pointer(&dy[o]), unsafe.Pointer(&x[o]), W, pm, pa, pb)
		sumsTail(Wv, W, dy[o:], x[o:], mean, a, b)
	}
}

// sumsTiles is sumsRows over tiles of rows: each tile of the channels,
// tileStep wide (then one vector wide), walks the rows with its sums in
// float32 registers and adds them into a and b every foldRows rows; the
// channels past the last whole vector are summed row by row in float64.
// Summing in registers removes the accumulators' loads and stores, and
// float32 lanes are twice as many as float64 ones.
func sumsTiles(l *rowLoops, W, rows int, dy, x []float32, mean, a, b []float64) {
	v := l.tileStep / 4 // one vector's channels
	c := 0
	for ; c+l.tileStep <= W; c += l.tileStep {
		l.tile(rows, W, unsafe.Pointer(&dy[c]), unsafe.Pointer(&x[c]), unsafe.Pointer(&mean[c]), unsafe.Pointer(&a[c]), unsafe.Pointer(&b[c]))
	}
	for ; c+v <= W; c += v {
		l.tile1(rows, W, unsafe.Pointer(&dy[c]), unsafe.Pointer(&x[c]), unsafe.Pointer(&mean[c]), unsafe.Pointer(&a[c]), unsafe.Pointer(&b[c]))
	}
	if c < W {
		for o := 0; o < W*rows; o += W {
			sumsTail(c, W, dy[o:], x[o:], mean, a, b)
		}
	}
}

// tiles reports whether sumsRows sums rows rows of W channels in tiles:
// rows enough for a tile, and a row one tile wide (the tile walks the rows
// in memory order) or a call of at least minWideTile elements.
func (l *rowLoops) tiles(W, rows int) bool {
	return rows >= minTileRows && (W <= l.tileStep || W*rows >= minWideTile)
}

// foldRows is how many rows a tile sums in float32 before adding into the
// float64 sums: a float32 sum of foldRows terms errs by at most about
// foldRows·2⁻²⁴ of the terms' magnitudes, far below stock's float32 sum
// over the whole channel. minTileRows is the least number of rows worth a
// tile.
const (
	foldRows    = 16
	minTileRows = 4
)

// twoRowMax bounds the rows the channels-last loops take two at a time:
// two short rows halve the accumulator traffic, two long ones crowd L1.
// BenchmarkTrainingGrad's channels-last cases (C=64 to 512) chose it.
const twoRowMax = 256

// sumsRow2x32 is sumsRow32 over two adjacent rows at once, W apart, which
// halves the accumulator traffic. (Four rows at once made the hardware
// prefetcher give up on data from DRAM.)
func sumsRow2x32(n int, dy, x unsafe.Pointer, W int, mean, a, b unsafe.Pointer) {
	dy1, x1 := unsafe.Add(dy, 4*W), unsafe.Add(x, 4*W)
	for j := 0; j < n; j += f64Lanes {
		mu := load4d(mean, j)
		g0, g1 := widen4(dy, j), widen4(dy1, j)
		xc0, xc1 := widen4(x, j).Sub(mu), widen4(x1, j).Sub(mu)
		store4d(load4d(a, j).Add(g0.Add(g1)), a, j)
		store4d(g1.MulAdd(xc1, g0.MulAdd(xc0, load4d(b, j))), b, j)
	}
	archsimd.ClearAVXUpperBits()
}

// mean8 returns the eight float64 means at p[i:] rounded to float32
// (exactly: the means are float32 inputs).
func mean8(p unsafe.Pointer, i int) archsimd.Float32x8 {
	var v archsimd.Float32x8
	return v.SetLo(load4d(p, i).ConvertToFloat32()).SetHi(load4d(p, i+f64Lanes).ConvertToFloat32())
}

// fold8 adds the eight float32 partial sums v into the float64 accumulators
// at p[i:].
func fold8(v archsimd.Float32x8, p unsafe.Pointer, i int) {
	store4d(load4d(p, i).Add(v.GetLo().ConvertToFloat64()), p, i)
	store4d(load4d(p, i+f64Lanes).Add(v.GetHi().ConvertToFloat64()), p, i+f64Lanes)
}

// sumsTile32 adds into the float64 sums a (Σdy) and b (Σdy·(x−mean)) of 32
// channels their sums over rows rows W elements apart, formed in float32
// registers foldRows rows at a time. The means are read from a float32 copy
// on every row, which leaves the registers Go allocates to the sums.
func sumsTile32(rows, W int, dy, x, mean, a, b unsafe.Pointer) {
	var mu [32]float32
	pm := unsafe.Pointer(&mu)
	for i := 0; i < 32; i += 8 {
		store8(mean8(mean, i), pm, i)
	}
	o := 0 // the row's offset: no pointer past the last row is formed
	for rows > 0 {
		k := min(rows, foldRows)
		rows -= k
		var a0, a1, a2, a3, b0, b1, b2, b3 archsimd.Float32x8
		for ; k > 0; k-- {
			g := load8(dy, o)
			a0, b0 = a0.Add(g), g.MulAdd(load8(x, o).Sub(load8(pm, 0)), b0)
			g = load8(dy, o+8)
			a1, b1 = a1.Add(g), g.MulAdd(load8(x, o+8).Sub(load8(pm, 8)), b1)
			g = load8(dy, o+16)
			a2, b2 = a2.Add(g), g.MulAdd(load8(x, o+16).Sub(load8(pm, 16)), b2)
			g = load8(dy, o+24)
			a3, b3 = a3.Add(g), g.MulAdd(load8(x, o+24).Sub(load8(pm, 24)), b3)
			o += W
		}
		fold8(a0, a, 0)
		fold8(a1, a, 8)
		fold8(a2, a, 16)
		fold8(a3, a, 24)
		fold8(b0, b, 0)
		fold8(b1, b, 8)
		fold8(b2, b, 16)
		fold8(b3, b, 24)
	}
	archsimd.ClearAVXUpperBits()
}

// sumsTile1x32 is sumsTile32 for eight channels.
func sumsTile1x32(rows, W int, dy, x, mean, a, b unsafe.Pointer) {
	m := mean8(mean, 0)
	o := 0 // the row's offset: no pointer past the last row is formed
	for rows > 0 {
		k := min(rows, foldRows)
		rows -= k
		var sa, sb archsimd.Float32x8
		for ; k > 0; k-- {
			g := load8(dy, o)
			sa = sa.Add(g)
			sb = g.MulAdd(load8(x, o).Sub(m), sb)
			o += W
		}
		fold8(sa, a, 0)
		fold8(sb, b, 0)
	}
	archsimd.ClearAVXUpperBits()
}

// sumsRow32 adds the first n (a multiple of 4) channels of one row (W, the
// row length, is unused). A loop of its own, over few pointers, keeps them
// all in registers.
func sumsRow32(n int, dy, x unsafe.Pointer, _ int, mean, a, b unsafe.Pointer) {
	for j := 0; j < n; j += f64Lanes {
		g := widen4(dy, j)
		xc := widen4(x, j).Sub(load4d(mean, j))
		store4d(load4d(a, j).Add(g), a, j)
		store4d(g.MulAdd(xc, load4d(b, j)), b, j)
	}
	archsimd.ClearAVXUpperBits()
}

// sumsTail adds channels [from, W) of the row at dy, x into a and b.
func sumsTail(from, W int, dy, x []float32, mean, a, b []float64) {
	for j := from; j < W; j++ {
		g := float64(dy[j])
		a[j] += g
		b[j] += g * (float64(x[j]) - mean[j])
	}
}

// runZeros are the zeros sumsPlanes32 and sumsPlaneLanes32, and their
// AVX-512 forms, load into their accumulators (on each run, in the former). A zero vector the compiler set once (var
// a0 archsimd.Float64x4) stayed in a register across the runs, which kept
// the upper halves in use through each run's scalar code after
// ClearAVXUpperBits: five times slower; a load from memory is not held
// across the runs' stores.
var runZeros [f64Lanes512]float64

// sumsPlanes32 is sumsChannelsFirst for float32 over the planes of S
// elements of C channels, the block's first element pos into channel c's:
// each run of one channel is summed in float64, eight elements at a time in
// two pairs of float64x4 accumulators, then its scalar tail (runSumsTail),
// and added into its channel's sums. The runs' loop holds their vector
// code: a call per run cost more than a 7x7 plane's arithmetic.
func sumsPlanes32(C, S, c, pos int, dy, x []float32, mean, sumDy, sumDyXc []float64) {
	n := len(x)
	needLen(n, dy)
	needLen(C, mean, sumDy, sumDyXc)
	pdy, px := ptr32(dy), ptr32(x)
	for i := 0; i < n; {
		e := i + min(S-pos, n-i) // the run is [i, e)
		mu := mean[c]
		var s, sx float64
		j := i
		if e-i >= 2*f64Lanes {
			muv := archsimd.BroadcastFloat64x4(mu)
			a0 := load4d(unsafe.Pointer(&runZeros), 0)
			a1, b0, b1 := a0, a0, a0
			for ; j+2*f64Lanes <= e; j += 2 * f64Lanes {
				g0, g1 := widen4(pdy, j), widen4(pdy, j+f64Lanes)
				x0, x1 := widen4(px, j).Sub(muv), widen4(px, j+f64Lanes).Sub(muv)
				a0, a1 = a0.Add(g0), a1.Add(g1)
				b0, b1 = g0.MulAdd(x0, b0), g1.MulAdd(x1, b1)
			}
			var la, lb [4]float64
			quad(a0.Add(a1)).Store(&la)
			quad(b0.Add(b1)).Store(&lb)
			archsimd.ClearAVXUpperBits()
			s = (la[0] + la[1]) + (la[2] + la[3])
			sx = (lb[0] + lb[1]) + (lb[2] + lb[3])
		}
		s, sx = runSumsTail(dy[j:e], x[j:e], mu, s, sx)
		sumDy[c] += s
		sumDyXc[c] += sx
		i = e
		pos = 0
		if c++; c == C {
			c = 0
		}
	}
}

// sumsPlaneLanes32 is sumsPlanes32 for a by-channel unit, whose planes
// (or pieces of a plane that start at its start) lie at flat offset off:
// each run of one channel is summed in float32 lanes, a vector of elements
// a step and foldRows steps at most, its tail of fewer elements than a
// vector a step among them, as the channels-last tiles sum theirs; each
// such sum's two halves are then widened, added, and added into the
// channel's float64 lanes, lanes[planeLanes·c:] for Σdy and
// lanes[planeLanes·c+planeLanes/2:] for Σdy·(x−mean) (four each here,
// eight at AVX-512), which stay unreduced until reducePlaneLanes adds them
// up. mean holds the float32 means (exactly the inputs) and meanPad more.
// Float64 steps, which widened every element, left 7x7 planes limited by
// the vector ports, and reducing each plane's lanes to scalars (with its
// scalar tail after ClearAVXUpperBits) cost as much as summing it. The tail
// is the run's last vector with the lanes before the tail masked (summed
// already) where the run has a vector's elements, else a masked load of
// the tail, the rest unread; the lanes it leaves out add exactly zero, even
// where the mean is not finite. No scalar float instruction runs inside
// the loop: with the vectors' upper halves in use, a legacy SSE one (a
// scalar load of the mean) took ten times as long.
func sumsPlaneLanes32(C, S, off int, dy, x, mean []float32, lanes []float64) {
	n := len(x)
	needLen(n, dy)
	needLen(C+meanPad, mean)
	needLen(planeLanes*C, lanes)
	pdy, px, pl, pm := ptr32(dy), ptr32(x), ptr64(lanes), ptr32(mean)
	zero := load8(unsafe.Pointer(&runZeros), 0)
	lane := archsimd.LoadInt32x8(&laneNumbers)
	c, pos := off/S%C, off%S
	for i := 0; i < n; {
		e := i + min(S-pos, n-i) // the run is [i, e)
		muv := broadcastAt8(pm, c)
		la, lb := load4d(pl, planeLanes*c), load4d(pl, planeLanes*c+planeLanes/2)
		for j := i; j < e; {
			sa, sb := zero, zero
			k := 0
			for ; k < foldRows && j+f32Lanes <= e; k++ {
				g := load8(pdy, j)
				sa = sa.Add(g)
				sb = g.MulAdd(load8(px, j).Sub(muv), sb)
				j += f32Lanes
			}
			if k < foldRows && j < e {
				r := int32(e - j) // the tail
				var g, xv archsimd.Float32x8
				var m archsimd.Mask32x8
				if e-i >= f32Lanes {
					m = lane.GreaterEqual(archsimd.BroadcastInt32x8(f32Lanes - r))
					g, xv = load8(pdy, e-f32Lanes), load8(px, e-f32Lanes)
				} else {
					m = lane.Less(archsimd.BroadcastInt32x8(r))
					g, xv = loadMasked8(pdy, j, m), loadMasked8(px, j, m)
				}
				g = g.Masked(m)
				sa = sa.Add(g)
				sb = g.MulAdd(xv.Sub(muv).Masked(m), sb)
				j = e
			}
			la = la.Add(sa.GetLo().ConvertToFloat64().Add(sa.GetHi().ConvertToFloat64()))
			lb = lb.Add(sb.GetLo().ConvertToFloat64().Add(sb.GetHi().ConvertToFloat64()))
		}
		store4d(la, pl, planeLanes*c)
		store4d(lb, pl, planeLanes*c+planeLanes/2)
		i = e
		pos = 0
		if c++; c == C {
			c = 0
		}
	}
	archsimd.ClearAVXUpperBits()
}

// sumsPlaneLanesBF16 is sumsPlaneLanes32 over bfloat16 planes, each vector
// widened in its register (loadBF16x8) instead of through a float32 block,
// so that memory serves two bytes an element where the block moved
// fourteen: it sums exactly what sumsPlaneLanes32 sums on the widened
// planes, bit for bit. A run shorter than a vector is widened into a vector
// by integer code, which leaves the vector registers alone.
func sumsPlaneLanesBF16(C, S, off int, dy, x []BFloat16, mean []float32, lanes []float64) {
	n := len(x)
	if len(dy) < n {
		panic("kernels: slice shorter than the loop")
	}
	needLen(C+meanPad, mean)
	needLen(planeLanes*C, lanes)
	pdy, px := unsafe.Pointer(unsafe.SliceData(dy)), unsafe.Pointer(unsafe.SliceData(x))
	pl, pm := ptr64(lanes), ptr32(mean)
	zero := load8(unsafe.Pointer(&runZeros), 0)
	lane := archsimd.LoadInt32x8(&laneNumbers)
	by16 := archsimd.BroadcastUint32x8(16)
	var short [2 * f32Lanes]uint32 // a run under a vector: its dy, then its x, widened
	ps := unsafe.Pointer(&short)
	c, pos := off/S%C, off%S
	for i := 0; i < n; {
		e := i + min(S-pos, n-i) // the run is [i, e)
		muv := broadcastAt8(pm, c)
		la, lb := load4d(pl, planeLanes*c), load4d(pl, planeLanes*c+planeLanes/2)
		for j := i; j < e; {
			sa, sb := zero, zero
			k := 0
			for ; k < foldRows && j+f32Lanes <= e; k++ {
				g := loadBF16x8(pdy, j, by16)
				sa = sa.Add(g)
				sb = g.MulAdd(loadBF16x8(px, j, by16).Sub(muv), sb)
				j += f32Lanes
			}
			if k < foldRows && j < e {
				r := int32(e - j) // the tail
				var g, xv archsimd.Float32x8
				var m archsimd.Mask32x8
				if e-i >= f32Lanes {
					m = lane.GreaterEqual(archsimd.BroadcastInt32x8(f32Lanes - r))
					g, xv = loadBF16x8(pdy, e-f32Lanes, by16), loadBF16x8(px, e-f32Lanes, by16)
				} else {
					m = lane.Less(archsimd.BroadcastInt32x8(r))
					for q := range int(r) {
						short[q], short[f32Lanes+q] = uint32(dy[j+q])<<16, uint32(x[j+q])<<16
					}
					g, xv = load8(ps, 0), load8(ps, f32Lanes)
				}
				g = g.Masked(m)
				sa = sa.Add(g)
				sb = g.MulAdd(xv.Sub(muv).Masked(m), sb)
				j = e
			}
			la = la.Add(sa.GetLo().ConvertToFloat64().Add(sa.GetHi().ConvertToFloat64()))
			lb = lb.Add(sb.GetLo().ConvertToFloat64().Add(sb.GetHi().ConvertToFloat64()))
		}
		store4d(la, pl, planeLanes*c)
		store4d(lb, pl, planeLanes*c+planeLanes/2)
		i = e
		pos = 0
		if c++; c == C {
			c = 0
		}
	}
	archsimd.ClearAVXUpperBits()
}

// applyPlanesBF16 is applyPlanes32 over bfloat16 planes, widened in its
// registers, with dx rounded as narrowBFloat16 rounds it (roundBF16x8): it
// writes exactly what applyPlanes32 and narrowBFloat16 write through a
// float32 block. A run's last few elements go through vectors of
// integer-widened elements, and their bfloat16s out by integer code.
func applyPlanesBF16(C, S, c, pos int, t *affine32, dy, x, dx []BFloat16) {
	n := len(x)
	if len(dy) < n || len(dx) < n {
		panic("kernels: slice shorter than the loop")
	}
	needLen(C, t.A, t.B, t.MeanDy, t.Mean)
	t.needPadded()
	pdy, px, pdx := unsafe.Pointer(unsafe.SliceData(dy)), unsafe.Pointer(unsafe.SliceData(x)), unsafe.Pointer(unsafe.SliceData(dx))
	pa, pb, pmdy, pmu := ptr32(t.A), ptr32(t.B), ptr32(t.MeanDy), ptr32(t.Mean)
	k := &bf16Round8
	by16 := k.by16
	var tail [3 * f32Lanes]uint32 // a run's last few: dy and x widened, then dx rounded
	pt := unsafe.Pointer(&tail)
	for i := 0; i < n; {
		e := i + min(S-pos, n-i) // the run is [i, e)
		j := i
		r := (e - i) % f32Lanes
		for q := range r {
			tail[q] = uint32(dy[e-r+q]) << 16
			if !t.ScaleOnly {
				tail[f32Lanes+q] = uint32(x[e-r+q]) << 16
			}
		}
		av := broadcastAt8(pa, c)
		if t.ScaleOnly {
			for ; j+f32Lanes <= e; j += f32Lanes {
				storeBF16x8(roundBF16x8(loadBF16x8(pdy, j, by16).Mul(av), k), pdx, j)
			}
			if r > 0 {
				roundBF16x8(load8(pt, 0).Mul(av), k).Store((*[f32Lanes]uint32)(unsafe.Add(pt, 8*f32Lanes)))
			}
		} else {
			bv, mdyv, muv := broadcastAt8(pb, c), broadcastAt8(pmdy, c), broadcastAt8(pmu, c)
			for ; j+f32Lanes <= e; j += f32Lanes {
				v := loadBF16x8(pdy, j, by16).Sub(mdyv).MulAdd(av, loadBF16x8(px, j, by16).Sub(muv).Mul(bv))
				storeBF16x8(roundBF16x8(v, k), pdx, j)
			}
			if r > 0 {
				v := load8(pt, 0).Sub(mdyv).MulAdd(av, load8(pt, f32Lanes).Sub(muv).Mul(bv))
				roundBF16x8(v, k).Store((*[f32Lanes]uint32)(unsafe.Add(pt, 8*f32Lanes)))
			}
		}
		for q := range r {
			dx[j+q] = BFloat16(tail[2*f32Lanes+q])
		}
		i = e
		pos = 0
		if c++; c == C {
			c = 0
		}
	}
	archsimd.ClearAVXUpperBits()
}

// loadBF16x8 returns the eight bfloat16s at p[i:] as float32s, each
// widened exactly (a shift by by16, 16 in every lane: a shift by a vector
// count, VPSLLVD, where a constant count is loaded by a legacy-SSE MOVQ).
func loadBF16x8(p unsafe.Pointer, i int, by16 archsimd.Uint32x8) archsimd.Float32x8 {
	return archsimd.LoadUint16x8((*[f32Lanes]uint16)(unsafe.Add(p, 2*i))).ExtendToUint32().ShiftLeft(by16).AsFloat32x8()
}

// roundBF16x8 returns v's lanes rounded to bfloat16 as BFloat16FromFloat32
// rounds them (to nearest even by adding 0x7fff plus the lowest kept bit,
// NaN kept quiet), each in the low half of its lane, with k's constants
// (bf16Round8). The shifts take their count from a
// vector (VPSRLVD): ShiftAllRight with a constant count loads it with a
// legacy-SSE MOVQ on every pass, which stalls for the AVX/SSE transition on
// Intel CPUs (go test -bench 'TrainingGrad$/BFloat16' shows it).
func roundBF16x8(v archsimd.Float32x8, k *bf16Rounding8) archsimd.Uint32x8 {
	u := v.AsUint32x8()
	isNaN := u.And(k.abs).AsInt32x8().Greater(k.inf)
	hi := u.ShiftRight(k.by16)
	rounded := u.Add(k.bias).Add(hi.And(k.one)).ShiftRight(k.by16)
	return hi.Or(k.quiet).Merge(rounded, isNaN)
}

// bf16Rounding8 holds roundBF16x8's constants, each in every lane; by16 is
// 16, for the shifts by a vector count (see loadBF16x8).
type bf16Rounding8 struct {
	abs, bias, one, quiet, by16 archsimd.Uint32x8
	inf                         archsimd.Int32x8
}

// bf16Round8 holds roundBF16x8's constants (newBF16Rounding8) where the
// CPU has AVX2 (init). The loops read them through a pointer: a copy of the
// struct into a loop's frame is made of 16-byte moves, legacy SSE, which
// the loop's first wide loads of it then wait for (a store that cannot be
// forwarded), and which stall for the AVX/SSE transition on Intel CPUs
// (applyPlanesBF16x16 spent a third of its time there, on planes of 3136).
var bf16Round8 bf16Rounding8

// newBF16Rounding8 returns roundBF16x8's constants.
func newBF16Rounding8() bf16Rounding8 {
	return bf16Rounding8{abs: archsimd.BroadcastUint32x8(0x7fffffff), bias: archsimd.BroadcastUint32x8(0x7fff),
		one: archsimd.BroadcastUint32x8(1), quiet: archsimd.BroadcastUint32x8(0x40), by16: archsimd.BroadcastUint32x8(16),
		inf: archsimd.BroadcastInt32x8(0x7f800000)}
}

// laneNumbers are the lane numbers of a vector of float32.
var laneNumbers = [f32Lanes]int32{0, 1, 2, 3, 4, 5, 6, 7}

// broadcastAt8 returns the float32 at p[c] in every lane, from a vector
// load of the four there (no scalar instruction): p[c+1:c+4] must be
// readable too (meanPad).
func broadcastAt8(p unsafe.Pointer, c int) archsimd.Float32x8 {
	return archsimd.LoadFloat32x4((*[4]float32)(unsafe.Add(p, 4*c))).Broadcast1To8()
}

// loadMasked8 is loadMasked16 on AVX2 vectors (VPMASKMOVD, which does not
// fault on the lanes it leaves out either).
//
//go:nocheckptr
func loadMasked8(p unsafe.Pointer, i int, m archsimd.Mask32x8) archsimd.Float32x8 {
	return archsimd.LoadMaskedFloat32x8((*[f32Lanes]float32)(unsafe.Add(p, 4*i)), m)
}

// storeMasked8 stores the lanes of v that mask m selects at p[i:], and
// leaves the others' memory alone, untouched (as loadMasked8, it may reach
// past the allocation).
//
//go:nocheckptr
func storeMasked8(v archsimd.Float32x8, p unsafe.Pointer, i int, m archsimd.Mask32x8) {
	v.StoreMasked((*[f32Lanes]float32)(unsafe.Add(p, 4*i)), m)
}

// runSumsTail adds a run's scalar tail into its sums so far; the AVX-512
// form's tail is runSumsTail512.
func runSumsTail(dy, x []float32, mu, sumDy, sumDyXc float64) (float64, float64) {
	for j, v := range dy {
		g := float64(v)
		sumDy += g
		sumDyXc += g * (float64(x[j]) - mu)
	}
	return sumDy, sumDyXc
}

// applyChannelsLast32 is applyChannelsLast for float32 over rows of L
// channels: dx = A·(dy−MeanDy) + B·(x−Mean) with FMA.
func applyChannelsLast32(L, off int, t *affine32, dy, x, dx []float32) {
	rowSpans(L, off, len(x), func(c0, i, W, rows int) {
		applyRows(W, rows, t, c0, dy[i:], x[i:], dx[i:])
	})
}

// applyRows writes dx over rows contiguous rows of W channels whose
// coefficients start at t's channel c0: in memory order, two short rows at a
// time.
func applyRows(W, rows int, t *affine32, c0 int, dy, x, dx []float32) {
	needLen(W*rows, dy, x, dx)
	a, b, mdy, mu := t.A[c0:], t.B[c0:], t.MeanDy[c0:], t.Mean[c0:]
	needLen(W, a, b, mdy, mu)
	l := rowLoopsInUse
	pa, pb, pd, pm := ptr32(a), ptr32(b), ptr32(mdy), ptr32(mu)
	Wv := W / l.applyStep * l.applyStep
	o := 0
	if t.Stream && W == Wv && !t.ScaleOnly && aligned32(dx) {
		// Every row starts 32-byte aligned, W being a multiple of 8.
		for ; o < W*rows; o += W {
			streamApplyRow(W, unsafe.Pointer(&dy[o]), unsafe.Pointer(&x[o]), unsafe.Pointer(&dx[o]), pa, pb, pd, pm)
		}
		return
	}
	if W == Wv && !t.ScaleOnly && W > applyChunk {
		applyChunks(l, W, rows, dy, x, dx, pa, pb, pd, pm)
		return
	}
	if W == Wv && !t.ScaleOnly && W < twoRowMax {
		for ; o+2*W <= W*rows; o += 2 * W {
			l.apply2(Wv, unsafe.Pointer(&dy[o]), unsafe.Pointer(&x[o]), unsafe.Pointer(&dx[o]), W, pa, pb, pd, pm)
		}
	}
	for ; o < W*rows; o += W {
		rdy, rx, rdx := unsafe.Pointer(&dy[o]), unsafe.Pointer(&x[o]), unsafe.Pointer(&dx[o])
		if t.ScaleOnly {
			l.scale(Wv, rdy, rdx, pa)
		} else {
			l.apply(Wv, rdy, rx, rdx, W, pa, pb, pd, pm)
		}
		applyTail(Wv, W, t.ScaleOnly, a, b, mdy, mu, dy[o:], x[o:], dx[o:])
	}
}

// applyChunks is applyRows' training loop for rows of W (a multiple of the
// vector step, more than applyChunk) channels: chunkRows rows at a time,
// applyChunk channels at a time.
func applyChunks(l *rowLoops, W, rows int, dy, x, dx []float32, pa, pb, pd, pm unsafe.Pointer) {
	for r0 := 0; r0 < rows; r0 += chunkRows {
		r1 := min(rows, r0+chunkRows)
		for c := 0; c < W; c += applyChunk {
			n := min(applyChunk, W-c)
			ca, cb, cd, cm := unsafe.Add(pa, 4*c), unsafe.Add(pb, 4*c), unsafe.Add(pd, 4*c), unsafe.Add(pm, 4*c)
			for o := r0*W + c; o < r1*W; o += W {
				l.apply(n, unsafe.Pointer(&dy[o]), unsafe.Pointer(&x[o]), unsafe.Pointer(&dx[o]), W, ca, cb, cd, cm)
			}
		}
	}
}

// applyRow32 writes the first n (a multiple of 8) channels of one row (W,
// the row length, is unused).
func applyRow32(n int, dy, x, dx unsafe.Pointer, _ int, a, b, mdy, mu unsafe.Pointer) {
	for j := 0; j < n; j += f32Lanes {
		r := load8(x, j).Sub(load8(mu, j)).Mul(load8(b, j))
		store8(load8(dy, j).Sub(load8(mdy, j)).MulAdd(load8(a, j), r), dx, j)
	}
	archsimd.ClearAVXUpperBits()
}

// applyRow2x32 is applyRow32 over two adjacent rows, W apart, with the
// coefficients loaded once for both.
func applyRow2x32(n int, dy, x, dx unsafe.Pointer, W int, a, b, mdy, mu unsafe.Pointer) {
	dy1, x1, dx1 := unsafe.Add(dy, 4*W), unsafe.Add(x, 4*W), unsafe.Add(dx, 4*W)
	for j := 0; j < n; j += f32Lanes {
		av, bv, dv, mv := load8(a, j), load8(b, j), load8(mdy, j), load8(mu, j)
		store8(load8(dy, j).Sub(dv).MulAdd(av, load8(x, j).Sub(mv).Mul(bv)), dx, j)
		store8(load8(dy1, j).Sub(dv).MulAdd(av, load8(x1, j).Sub(mv).Mul(bv)), dx1, j)
	}
	archsimd.ClearAVXUpperBits()
}

// scaleRow32 writes dx = a·dy for the first n (a multiple of 8) channels of
// one row.
func scaleRow32(n int, dy, dx, a unsafe.Pointer) {
	for j := 0; j < n; j += f32Lanes {
		store8(load8(dy, j).Mul(load8(a, j)), dx, j)
	}
	archsimd.ClearAVXUpperBits()
}

// applyTail writes dx for channels [from, W) of the row at dy, x, dx.
func applyTail(from, W int, scaleOnly bool, a, b, mdy, mu, dy, x, dx []float32) {
	for j := from; j < W; j++ {
		if scaleOnly {
			dx[j] = a[j] * dy[j]
		} else {
			dx[j] = a[j]*(dy[j]-mdy[j]) + b[j]*(x[j]-mu[j])
		}
	}
}

// applyChannelsFirst32 is applyChannelsFirst for float32 from flat offset
// off. A streamed pass writes each run that starts 32-byte aligned with
// non-temporal stores (streamRun), and the others as applyPlanes does.
func applyChannelsFirst32(C, S, off int, t *affine32, dy, x, dx []float32) {
	c, pos := off/S%C, off%S
	if !t.Stream || t.ScaleOnly {
		applyPlanes(C, S, c, pos, t, dy, x, dx)
		return
	}
	for i, n := 0, len(x); i < n; {
		m := min(S-pos, n-i)
		if aligned32(dx[i:]) {
			streamRun(t.A[c], t.B[c], t.MeanDy[c], t.Mean[c], dy[i:i+m], x[i:i+m], dx[i:i+m])
		} else {
			applyPlanes(C, S, c, pos, t, dy[i:i+m], x[i:i+m], dx[i:i+m])
		}
		i += m
		pos = 0
		if c++; c == C {
			c = 0
		}
	}
}

// applyPlanes32 is applyChannelsFirst for float32 over the planes of S
// elements of C channels, the block's first element pos into channel c's:
// each run of one channel with its coefficients broadcast, eight elements
// at a time, then its last few in a masked vector, in one loop over the
// runs as sumsPlanes32. Every element is computed alike, in a whole vector
// or a run's tail, at either width, streamed or not (streamRun):
// (dy−MeanDy)·A + (x−Mean)·B rounded once by the FMA, or dy·A where
// t.ScaleOnly (x is not read). No scalar float instruction runs in the
// loop, whose coefficients are broadcast from vector loads (broadcastAt8,
// t's layout): a scalar tail a run, and the ClearAVXUpperBits before it,
// cost a 7x7 plane as much as its vectors.
func applyPlanes32(C, S, c, pos int, t *affine32, dy, x, dx []float32) {
	n := len(x)
	needLen(n, dy, dx)
	needLen(C, t.A, t.B, t.MeanDy, t.Mean)
	t.needPadded()
	pdy, px, pdx := ptr32(dy), ptr32(x), ptr32(dx)
	pa, pb, pmdy, pmu := ptr32(t.A), ptr32(t.B), ptr32(t.MeanDy), ptr32(t.Mean)
	lane := archsimd.LoadInt32x8(&laneNumbers)
	for i := 0; i < n; {
		e := i + min(S-pos, n-i) // the run is [i, e)
		j := i
		av := broadcastAt8(pa, c)
		if t.ScaleOnly {
			for ; j+f32Lanes <= e; j += f32Lanes {
				store8(load8(pdy, j).Mul(av), pdx, j)
			}
			if j < e {
				m := lane.Less(archsimd.BroadcastInt32x8(int32(e - j)))
				storeMasked8(loadMasked8(pdy, j, m).Mul(av), pdx, j, m)
			}
		} else {
			bv, mdyv, muv := broadcastAt8(pb, c), broadcastAt8(pmdy, c), broadcastAt8(pmu, c)
			for ; j+f32Lanes <= e; j += f32Lanes {
				store8(load8(pdy, j).Sub(mdyv).MulAdd(av, load8(px, j).Sub(muv).Mul(bv)), pdx, j)
			}
			if j < e {
				m := lane.Less(archsimd.BroadcastInt32x8(int32(e - j)))
				g := loadMasked8(pdy, j, m)
				storeMasked8(g.Sub(mdyv).MulAdd(av, loadMasked8(px, j, m).Sub(muv).Mul(bv)), pdx, j, m)
			}
		}
		i = e
		pos = 0
		if c++; c == C {
			c = 0
		}
	}
	archsimd.ClearAVXUpperBits()
}

// applyRunTail writes the tail of a streamed run (streamRun), under eight
// elements, in a masked vector, computed as applyPlanes32 computes it.
func applyRunTail(a, b, mdy, mu float32, dy, x, dx []float32) {
	r := len(dy)
	if r == 0 {
		return
	}
	needLen(r, x, dx)
	m := archsimd.LoadInt32x8(&laneNumbers).Less(archsimd.BroadcastInt32x8(int32(r)))
	av, bv := archsimd.BroadcastFloat32x8(a), archsimd.BroadcastFloat32x8(b)
	mdyv, muv := archsimd.BroadcastFloat32x8(mdy), archsimd.BroadcastFloat32x8(mu)
	g, xv := loadMasked8(ptr32(dy), 0, m), loadMasked8(ptr32(x), 0, m)
	storeMasked8(g.Sub(mdyv).MulAdd(av, xv.Sub(muv).Mul(bv)), ptr32(dx), 0, m)
	archsimd.ClearAVXUpperBits()
}

// streamRun is a run of applyPlanes32's training form with non-temporal
// stores (stream_amd64.s) up to the last whole vector, and the same masked
// tail; dx must start 32-byte aligned.
func streamRun(a, b, mdy, mu float32, dy, x, dx []float32) {
	m := len(dy)
	needLen(m, x, dx)
	v := m &^ 7
	streamApplyRun(v, ptr32(dy), ptr32(x), ptr32(dx), a, b, mdy, mu)
	applyRunTail(a, b, mdy, mu, dy[v:], x[v:], dx[v:])
}

// The non-temporal loops and the fence (stream_amd64.s).
func streamApplyRow(n int, dy, x, dx, a, b, mdy, mu unsafe.Pointer)
func streamApplyRun(n int, dy, x, dx unsafe.Pointer, a, b, mdy, mu float32)
func streamFence()

// maskRows32 is maskGrad over the leading multiple of 64 of dz's
// elements, eight at a time, and returns that multiple: dz = dy·m, m 1
// where 0 < y (and y < 6 where upper), else 0 (a NaN y compares false; a
// NaN or infinite dy times 0 is NaN), and, where bits is not nil, m's
// bits, element i's at bit i%64 of bits[i/64].
func maskRows32(dz, dy, y []float32, upper bool, bits []uint64) int {
	n := len(dz) / 64 * 64
	needLen(n, dy, y)
	if bits != nil && len(bits) < n/64 {
		panic("kernels: mask bits shorter than the loop")
	}
	pz, pd, py := ptr32(dz), ptr32(dy), ptr32(y)
	zero, six, one := archsimd.BroadcastFloat32x8(0), archsimd.BroadcastFloat32x8(6), archsimd.BroadcastFloat32x8(1)
	for w := 0; w < n/64; w++ {
		var word uint64
		for k := 0; k < 64; k += f32Lanes {
			j := 64*w + k
			v := load8(py, j)
			on := v.Greater(zero)
			if upper {
				on = on.And(v.Less(six))
			}
			store8(load8(pd, j).Mul(one.Masked(on)), pz, j)
			word |= uint64(on.ToBits()) << k
		}
		if bits != nil {
			bits[w] = word
		}
	}
	archsimd.ClearAVXUpperBits()
	return n
}

// unmaskRows32 is unmaskGrad over the leading multiple of eight of dz's
// elements, eight at a time, and returns that multiple: dz = dy·m, m's
// bits from bit pos of bits on (bits[(pos+j)/64+1] must be there, the
// spare word of a granule's).
func unmaskRows32(dz, dy []float32, bits []uint64, pos int) int {
	n := len(dz) / f32Lanes * f32Lanes
	needLen(n, dy)
	pz, pd := ptr32(dz), ptr32(dy)
	one := archsimd.BroadcastFloat32x8(1)
	for j := 0; j < n; j += f32Lanes {
		p := pos + j
		w := bits[p/64]>>(p%64) | bits[p/64+1]<<(64-p%64)
		store8(load8(pd, j).Mul(one.Masked(maskFromBits8(w))), pz, j)
	}
	archsimd.ClearAVXUpperBits()
	return n
}

// maskFromBits8 returns the mask of the low eight bits of w, lane l bit l.
func maskFromBits8(w uint64) archsimd.Mask32x8 { return archsimd.Mask32x8FromBits(uint8(w)) }

// widenBFloat16 converts bfloat16 bits to float32, eight at a time.
func widenBFloat16(dst []float32, src []BFloat16) {
	n := len(src)
	dst = dst[:n]
	ps, pd := unsafe.Pointer(unsafe.SliceData(src)), ptr32(dst)
	by16 := archsimd.BroadcastUint32x8(16)
	j := 0
	for ; j+f32Lanes <= n; j += f32Lanes {
		store8(loadBF16x8(ps, j, by16), pd, j)
	}
	archsimd.ClearAVXUpperBits()
	for ; j < n; j++ {
		dst[j] = src[j].Float32()
	}
}

// narrowBFloat16 is BFloat16FromFloat32 over a slice, eight at a time
// (roundBF16x8).
func narrowBFloat16(dst []BFloat16, src []float32) {
	n := len(src)
	dst = dst[:n]
	ps, pd := ptr32(src), unsafe.Pointer(unsafe.SliceData(dst))
	k := &bf16Round8
	j := 0
	for ; j+f32Lanes <= n; j += f32Lanes {
		storeBF16x8(roundBF16x8(load8(ps, j), k), pd, j)
	}
	archsimd.ClearAVXUpperBits()
	for ; j < n; j++ {
		dst[j] = BFloat16FromFloat32(src[j])
	}
}

// storeBF16x8 writes the low halves of v's lanes, each at most 0xffff, to
// the bfloat16s p[i:i+8]. AVX2 has no narrowing store: it packs the two
// halves of v, which saturating leaves as they are.
func storeBF16x8(v archsimd.Uint32x8, p unsafe.Pointer, i int) {
	o := v.AsInt32x8()
	o.GetLo().SaturateToUint16Concat(o.GetHi()).Store((*[f32Lanes]uint16)(unsafe.Add(p, 2*i)))
}

// hasF16C reports whether the CPU has the F16C conversions (f16c_amd64.s).
func hasF16C() bool

// widenHalf8 and narrowHalf8 convert the first len(src)&^7 elements with
// F16C (f16c_amd64.s); dst must be at least that long.
func widenHalf8(dst []float32, src []Half)
func narrowHalf8(dst []Half, src []float32)

// widenHalf is Half.Float32 over a slice, eight at a time with F16C.
func widenHalf(dst []float32, src []Half) {
	n := len(src)
	dst = dst[:n]
	widenHalf8(dst, src)
	for j := n &^ 7; j < n; j++ {
		dst[j] = halfTable[src[j]]
	}
}

// narrowHalf is HalfFromFloat32 over a slice, eight at a time with F16C,
// which rounds to nearest even as HalfFromFloat32 does (a NaN keeps its
// sign and some of its payload, where HalfFromFloat32 gives the canonical
// quiet NaN).
func narrowHalf(dst []Half, src []float32) {
	n := len(src)
	dst = dst[:n]
	narrowHalf8(dst, src)
	for j := n &^ 7; j < n; j++ {
		dst[j] = HalfFromFloat32(src[j])
	}
}

// The masked channels-last loops of FusedBatchNormGradEx's two passes,
// which form dz = dy·m in their registers where they load dy instead of in
// a block of memory (gradMask.blocks): the first pass's sums tiles write
// m's bits as they go, the second pass's rows read them. Bits are stored a
// vector at a time, bit e of the bytes at bits for element e of the tile or
// row (e a multiple of eight: the rows' lengths and offsets are).

// storeBits8 stores the eight bits of m, lane l's at bit e+l of the bytes
// at p.
func storeBits8(p unsafe.Pointer, e int, m archsimd.Mask32x8) {
	*(*uint8)(unsafe.Add(p, e/8)) = m.ToBits()
}

// loadBits8 returns the mask of the eight bits from bit e of the bytes at p.
func loadBits8(p unsafe.Pointer, e int) archsimd.Mask32x8 {
	return archsimd.Mask32x8FromBits(*(*uint8)(unsafe.Add(p, e/8)))
}

// activeLanes returns the lanes where y is on the activation: 0 < y, and
// y < 6 where upper (a NaN y is off).
func activeLanes(y, zero, six archsimd.Float32x8, upper bool) archsimd.Mask32x8 {
	on := y.Greater(zero)
	if upper {
		on = on.And(y.Less(six))
	}
	return on
}

// sumsTileMask32 is sumsTile1x32 over two vectors of channels of dz = dy·m,
// m from y (maskRows32's), and writes m's bits from the bytes at bits, the
// rows W bits apart.
func sumsTileMask32(rows, W int, dy, x, y, mean, a, b, bits unsafe.Pointer, upper bool) {
	m0, m1 := mean8(mean, 0), mean8(mean, f32Lanes)
	zero, six, one := archsimd.BroadcastFloat32x8(0), archsimd.BroadcastFloat32x8(6), archsimd.BroadcastFloat32x8(1)
	o := 0 // the row's offset: no pointer past the last row is formed
	for rows > 0 {
		k := min(rows, foldRows)
		rows -= k
		var a0, a1, b0, b1 archsimd.Float32x8
		for ; k > 0; k-- {
			on := activeLanes(load8(y, o), zero, six, upper)
			storeBits8(bits, o, on)
			g := load8(dy, o).Mul(one.Masked(on))
			a0, b0 = a0.Add(g), g.MulAdd(load8(x, o).Sub(m0), b0)
			on = activeLanes(load8(y, o+f32Lanes), zero, six, upper)
			storeBits8(bits, o+f32Lanes, on)
			g = load8(dy, o+f32Lanes).Mul(one.Masked(on))
			a1, b1 = a1.Add(g), g.MulAdd(load8(x, o+f32Lanes).Sub(m1), b1)
			o += W
		}
		fold8(a0, a, 0)
		fold8(a1, a, f32Lanes)
		fold8(b0, b, 0)
		fold8(b1, b, f32Lanes)
	}
	archsimd.ClearAVXUpperBits()
}

// sumsTileMask1x32 is sumsTileMask32 for one vector of channels.
func sumsTileMask1x32(rows, W int, dy, x, y, mean, a, b, bits unsafe.Pointer, upper bool) {
	m0 := mean8(mean, 0)
	zero, six, one := archsimd.BroadcastFloat32x8(0), archsimd.BroadcastFloat32x8(6), archsimd.BroadcastFloat32x8(1)
	o := 0
	for rows > 0 {
		k := min(rows, foldRows)
		rows -= k
		var a0, b0 archsimd.Float32x8
		for ; k > 0; k-- {
			on := activeLanes(load8(y, o), zero, six, upper)
			storeBits8(bits, o, on)
			g := load8(dy, o).Mul(one.Masked(on))
			a0, b0 = a0.Add(g), g.MulAdd(load8(x, o).Sub(m0), b0)
			o += W
		}
		fold8(a0, a, 0)
		fold8(b0, b, 0)
	}
	archsimd.ClearAVXUpperBits()
}

// applyRowMask32 is applyRow32 of dz = dy·m, m's bits read from the bytes
// at bits.
func applyRowMask32(n int, dy, x, dx, bits, a, b, mdy, mu unsafe.Pointer) {
	one := archsimd.BroadcastFloat32x8(1)
	for j := 0; j < n; j += f32Lanes {
		g := load8(dy, j).Mul(one.Masked(loadBits8(bits, j)))
		r := load8(x, j).Sub(load8(mu, j)).Mul(load8(b, j))
		store8(g.Sub(load8(mdy, j)).MulAdd(load8(a, j), r), dx, j)
	}
	archsimd.ClearAVXUpperBits()
}

// applyRowsMask32 is applyRowMask32 over rows rows W apart, their first
// n channels, the rows' bits W bits apart. It has no streaming form.
func applyRowsMask32(rows, n, W int, dy, x, dx, bits, a, b, mdy, mu unsafe.Pointer, _ bool) {
	for r := range rows {
		o := r * W
		applyRowMask32(n, unsafe.Add(dy, 4*o), unsafe.Add(x, 4*o), unsafe.Add(dx, 4*o), unsafe.Add(bits, o/8), a, b, mdy, mu)
	}
}

// maskedLoops are the masked channels-last loops at one vector width: tile
// sums tileStep channels, tile1 and apply (over rows of a multiple of
// lanes) one vector's; the last eight channels of a row of AVX-512
// vectors go to the AVX2 loops.
type maskedLoops struct {
	tileStep, lanes int
	tile, tile1     func(rows, W int, dy, x, y, mean, a, b, bits unsafe.Pointer, upper bool)
	apply           func(rows, n, W int, dy, x, dx, bits, a, b, mdy, mu unsafe.Pointer, stream bool)
}

var (
	avx2Masked   = &maskedLoops{2 * f32Lanes, f32Lanes, sumsTileMask32, sumsTileMask1x32, applyRowsMask32}
	avx512Masked = &maskedLoops{64, f32Lanes512, sumsTileMaskAsm512, sumsTileMask1Asm512, applyRowsMask512}
	maskedInUse  = avx2Masked
)

// sumsMaskedChannelsLast32 is channelSums of dz = dy·m over float32 rows of
// L channels from flat offset off, m from y (upper: Relu6's), its bits
// written from bit 0 of the bytes at bits; L, off and len(dy) multiples of
// eight.
func sumsMaskedChannelsLast32(L, off int, dy, x, y []float32, mean, a, b []float64, bits unsafe.Pointer, upper bool) {
	needLen(len(dy), x, y)
	l := maskedInUse
	rowSpans(L, off, len(dy), func(c0, i, W, rows int) {
		tile := func(fn func(rows, W int, dy, x, y, mean, a, b, bits unsafe.Pointer, upper bool), c int) {
			fn(rows, L, unsafe.Pointer(&dy[i+c]), unsafe.Pointer(&x[i+c]), unsafe.Pointer(&y[i+c]),
				unsafe.Pointer(&mean[c0+c]), unsafe.Pointer(&a[c0+c]), unsafe.Pointer(&b[c0+c]), unsafe.Add(bits, (i+c)/8), upper)
		}
		c := 0
		for ; c+l.tileStep <= W; c += l.tileStep {
			tile(l.tile, c)
		}
		for ; c+l.lanes <= W; c += l.lanes {
			tile(l.tile1, c)
		}
		for ; c < W; c += f32Lanes {
			tile(sumsTileMask1x32, c)
		}
	})
}

// applyMaskedChannelsLast32 is applyAffine of dz = dy·m over float32 rows
// of L channels from flat offset off, m's bits read from bit 0 of the
// bytes at bits; L, off and len(dy) multiples of eight. Where t.Stream,
// the AVX-512 loop writes rows that start 64-byte aligned with
// non-temporal stores.
func applyMaskedChannelsLast32(L, off int, t *affine32, dy, x, dx []float32, bits unsafe.Pointer) {
	needLen(len(dy), x, dx)
	l := maskedInUse
	rowSpans(L, off, len(dy), func(c0, i, W, rows int) {
		Wv := W / l.lanes * l.lanes
		at := func(c int) (pdy, px, pdx, pbits, pa, pb, pd, pm unsafe.Pointer) {
			return unsafe.Pointer(&dy[i+c]), unsafe.Pointer(&x[i+c]), unsafe.Pointer(&dx[i+c]), unsafe.Add(bits, (i+c)/8),
				unsafe.Pointer(&t.A[c0+c]), unsafe.Pointer(&t.B[c0+c]), unsafe.Pointer(&t.MeanDy[c0+c]), unsafe.Pointer(&t.Mean[c0+c])
		}
		if Wv > 0 {
			pdy, px, pdx, pbits, pa, pb, pd, pm := at(0)
			stream := t.Stream && uintptr(pdx)%64 == 0 && (rows == 1 || L%16 == 0) && l == avx512Masked
			if stream {
				splits.maskStreamed.Add(1)
			}
			l.apply(rows, Wv, L, pdy, px, pdx, pbits, pa, pb, pd, pm, stream)
		}
		if Wv < W {
			pdy, px, pdx, pbits, pa, pb, pd, pm := at(Wv)
			applyRowsMask32(rows, W-Wv, L, pdy, px, pdx, pbits, pa, pb, pd, pm, false)
		}
	})
}

// avx512InUse reports whether the AVX-512 loops are selected.
func avx512InUse() bool { return maskedInUse == avx512Masked }
