package kernels

import "unsafe"

// channelSums accumulates, per channel, Σdy and Σdy·(x−μ) over the elements
// at flat indices [off, off+len(x)):
//
//	for i := range x { c := channel(off+i); dy[c] += y[i]; dyXc[c] += y[i]·(x[i]−mean[c]) }
//
// The products and sums are formed in float64.
func channelSums[F native](d Dims, off int, dy, x []F, mean, sumDy, sumDyXc []float64) {
	if len(dy) != len(x) {
		panic("kernels: dy and x lengths differ")
	}
	if simdSums != nil {
		if dy32, ok := any(dy).([]float32); ok {
			simdSums(d, off, dy32, any(x).([]float32), mean, sumDy, sumDyXc)
			return
		}
	}
	if d.Layout == ChannelsLast {
		sumsChannelsLast(int(d.C), off, dy, x, mean, sumDy, sumDyXc)
	} else {
		sumsChannelsFirst(int(d.C), int(d.S), off, dy, x, mean, sumDy, sumDyXc)
	}
}

func sumsChannelsLast[F native](C, off int, dy, x []F, mean, sumDy, sumDyXc []float64) {
	c0 := off % C
	for i, n := 0, len(x); i < n; {
		m := min(C-c0, n-i)
		dyRow, xRow := dy[i:i+m], x[i:i+m]
		meanRow, a, b := mean[c0:c0+m], sumDy[c0:c0+m], sumDyXc[c0:c0+m]
		for j := range dyRow {
			g := float64(dyRow[j])
			a[j] += g
			b[j] += g * (float64(xRow[j]) - meanRow[j])
		}
		i += m
		c0 = 0
	}
}

func sumsChannelsFirst[F native](C, S, off int, dy, x []F, mean, sumDy, sumDyXc []float64) {
	plane, pos := off/S, off%S
	for i, n := 0, len(x); i < n; {
		m := min(S-pos, n-i)
		c := plane % C
		mu := mean[c]
		var a, b float64
		for j, g := range dy[i : i+m] {
			g := float64(g)
			a += g
			b += g * (float64(x[i+j]) - mu)
		}
		sumDy[c] += a
		sumDyXc[c] += b
		i += m
		pos = 0
		plane++
	}
}

// affine is the per-channel form every gradient's x_backprop takes:
//
//	dx = A[c]·(dy − MeanDy[c]) + B[c]·(x − Mean[c])
//
// Centring dy and x before scaling keeps dx exact where the terms cancel (R = 1).
//
// ScaleOnly marks the inference forms, where B and MeanDy are zero: dx = A[c]·dy
// is then computed without reading x or mean, so that a NaN or infinite x or
// mean, which the math does not involve, cannot turn dx into NaN through
// 0·NaN or 0·Inf.
type affine struct {
	A, B, MeanDy, Mean []float64
	ScaleOnly          bool
	// f32 holds the coefficients rounded to float32, for the SIMD loops.
	f32 *affine32
}

// affine32 is affine in float32. Its four arrays lie one after the other in
// one buffer, with meanPad float32s more after Mean (layAffine32), so that
// the vector loops may broadcast any channel's coefficient from a vector
// load of four (broadcastAt8) without a scalar instruction. Such a load of
// a unit's last channel reads the next unit's first three, which another
// worker may be writing (round32): the lanes it reads past the channel are
// dropped by the broadcast, so the race changes no result.
type affine32 struct {
	A, B, MeanDy, Mean []float32
	ScaleOnly          bool
	// Stream has the training loops write dx with non-temporal stores where
	// its rows or runs are aligned for them (applyAll decides).
	Stream bool
}

// The AVX2+FMA loops for float32 (simd_amd64.go), or nil where the build or
// the CPU lacks them and the portable loops here run instead.
var (
	simdSums           func(d Dims, off int, dy, x []float32, mean, sumDy, sumDyXc []float64)
	simdApply          func(d Dims, off int, t *affine32, dy, x, dx []float32)
	simdWidenBFloat16  func(dst []float32, src []BFloat16)
	simdNarrowBFloat16 func(dst []BFloat16, src []float32)
	simdWidenHalf      func(dst []float32, src []Half)
	simdNarrowHalf     func(dst []Half, src []float32)
	// simdSumsBFloat16 and simdApplyBFloat16 are channelSums and
	// applyAffine over whole channels-last rows of L channels of bfloat16,
	// L a multiple of 16, converting in the vector loops (AVX-512 only).
	simdSumsBFloat16  func(L int, dy, x []BFloat16, mean, sumDy, sumDyXc []float64)
	simdApplyBFloat16 func(L int, t *affine32, dy, x, dx []BFloat16)
	// simdMaskRowsBFloat16 and simdUnmaskRowsBFloat16 are maskGrad and
	// unmaskGrad over bfloat16 rows for those loops (FusedBatchNormGradEx),
	// m's bits at bit pos of bits on: where the former's bits are not nil,
	// it writes them. pos and len(dz) are multiples of 16 (AVX-512 only).
	simdMaskRowsBFloat16   func(dz, dy, y []BFloat16, upper bool, bits []uint64, pos int)
	simdUnmaskRowsBFloat16 func(dz, dy []BFloat16, bits []uint64, pos int)
	// simdPlaneLanes sums a by-channel unit's float32 planes into each
	// channel's planeLanes float64 lanes, added up by reducePlaneLanes once
	// the channel's planes are summed.
	simdPlaneLanes func(C, S, off int, dy, x, mean []float32, lanes []float64)
	// simdChannelLanes sums a by-channel unit's float32 planes into the
	// same lanes channel by channel, over N samples of C channels of S
	// elements, where the AVX-512 assembly loops run (nil elsewhere).
	simdChannelLanes func(N, C, S, c0, c1 int, dy, x, mean []float32, lanes []float64)
	// simdPlaneLanesBFloat16 and simdApplyPlanesBFloat16 are simdPlaneLanes
	// and the float32 planes' applyAffine over bfloat16 planes, converting
	// in the vector loops: the same sums and dx, bit for bit, as through
	// float32 blocks (forBlocks).
	simdPlaneLanesBFloat16  func(C, S, off int, dy, x []BFloat16, mean []float32, lanes []float64)
	simdApplyPlanesBFloat16 func(C, S, c, pos int, t *affine32, dy, x, dx []BFloat16)
	// simdFence orders the calling thread's non-temporal stores (Stream)
	// before its later stores.
	simdFence func()
	// simdMaskRows and simdUnmaskRows are maskGrad and unmaskGrad over a
	// float32 block's leading elements (FusedBatchNormGradEx): they return
	// how many they took.
	simdMaskRows   func(dz, dy, y []float32, upper bool, bits []uint64) int
	simdUnmaskRows func(dz, dy []float32, bits []uint64, pos int) int
	// simdMaskedSums and simdMaskedApply are channelSums and applyAffine of
	// dz = dy·m over float32 rows of L channels (FusedBatchNormGradEx's two
	// passes), dz formed in the vector loops: the former takes m from y
	// and writes its bits from bit 0 of the bytes at bits, the latter reads
	// them. L, off and len(dy) are multiples of eight.
	simdMaskedSums  func(L, off int, dy, x, y []float32, mean, a, b []float64, bits unsafe.Pointer, upper bool)
	simdMaskedApply func(L, off int, t *affine32, dy, x, dx []float32, bits unsafe.Pointer)
	// simdMaskedPlaneLanes and simdMaskedApplyPlanes are simdPlaneLanes and
	// the float32 planes' applyAffine (neither streaming nor scale-only) of
	// dz = dy·m, m the Relu's (upper: Relu6's) formed from y in the vector
	// loops, by-channel units' second pass reading y again (AVX-512 only).
	simdMaskedPlaneLanes  func(C, S, off int, dy, x, y, mean []float32, lanes []float64, upper bool)
	simdMaskedApplyPlanes func(C, S, c, pos int, t *affine32, dy, x, y, dx []float32, upper bool)
)

// aligned32 reports whether s is not empty and starts on a 32-byte boundary,
// as the non-temporal stores need.
func aligned32(s []float32) bool {
	return len(s) > 0 && uintptr(unsafe.Pointer(unsafe.SliceData(s)))%32 == 0
}

// SIMD reports whether the float32 loops use AVX2 and FMA: gobn built with
// GOEXPERIMENT=simd, running on a CPU that has them.
func SIMD() bool { return simdSums != nil }

// repeated returns t with its arrays repeated to length L.
func (t affine) repeated(s *scratch, L int) affine {
	t.A, t.B, t.MeanDy, t.Mean = s.repeat(t.A, L), s.repeat(t.B, L), s.repeat(t.MeanDy, L), s.repeat(t.Mean, L)
	return t
}

// withFloat32 returns t with its float32 copy filled in when the SIMD loops
// will use it.
func (t affine) withFloat32(s *scratch) affine {
	if simdApply == nil {
		return t
	}
	L := len(t.A)
	f := &s.a32
	*f = layAffine32(s.float32s(4*L+meanPad), L)
	f.ScaleOnly = t.ScaleOnly
	t.f32 = f
	t.round32(0, L)
	return t
}

// layAffine32 returns an affine32 of L channels whose arrays are buf's, laid
// out as affine32 says; buf holds 4·L+meanPad float32s.
func layAffine32(buf []float32, L int) affine32 {
	buf = buf[: 4*L+meanPad : 4*L+meanPad]
	return affine32{A: buf[:L:L], B: buf[L : 2*L : 2*L], MeanDy: buf[2*L : 3*L : 3*L], Mean: buf[3*L : 4*L]}
}

// needPadded panics unless t's arrays are laid out as affine32 says.
func (t *affine32) needPadded() {
	L := len(t.A)
	next := func(a, b []float32) bool {
		return len(b) == L && unsafe.Pointer(unsafe.SliceData(b)) == unsafe.Add(unsafe.Pointer(unsafe.SliceData(a)), 4*L)
	}
	if L == 0 || !next(t.A, t.B) || !next(t.B, t.MeanDy) || !next(t.MeanDy, t.Mean) || cap(t.Mean) < L+meanPad {
		panic("kernels: affine32 not laid out by layAffine32")
	}
}

// round32 refreshes channels [c0, c1) of t's float32 copy, if it has one.
func (t affine) round32(c0, c1 int) {
	f := t.f32
	if f == nil {
		return
	}
	for i := c0; i < c1; i++ {
		f.A[i], f.B[i], f.MeanDy[i], f.Mean[i] = float32(t.A[i]), float32(t.B[i]), float32(t.MeanDy[i]), float32(t.Mean[i])
	}
}

// applyAffine writes dx for the elements at flat indices [off, off+len(x)),
// computed in float64 and rounded to F.
func applyAffine[F native](d Dims, off int, t affine, dy, x, dx []F) {
	if len(dy) != len(x) || len(dx) != len(x) {
		panic("kernels: dy, x and dx lengths differ")
	}
	if t.f32 != nil {
		if dy32, ok := any(dy).([]float32); ok {
			simdApply(d, off, t.f32, dy32, any(x).([]float32), any(dx).([]float32))
			return
		}
	}
	if t.ScaleOnly {
		applyScale(d, off, t.A, dy, dx)
		return
	}
	if d.Layout == ChannelsLast {
		applyChannelsLast(int(d.C), off, t, dy, x, dx)
	} else {
		applyChannelsFirst(int(d.C), int(d.S), off, t, dy, x, dx)
	}
}

func applyChannelsLast[F native](C, off int, t affine, dy, x, dx []F) {
	c0 := off % C
	for i, n := 0, len(x); i < n; {
		m := min(C-c0, n-i)
		dyRow, xRow, dxRow := dy[i:i+m], x[i:i+m], dx[i:i+m]
		a, b, mdy, mu := t.A[c0:c0+m], t.B[c0:c0+m], t.MeanDy[c0:c0+m], t.Mean[c0:c0+m]
		for j := range dyRow {
			dxRow[j] = F(a[j]*(float64(dyRow[j])-mdy[j]) + b[j]*(float64(xRow[j])-mu[j]))
		}
		i += m
		c0 = 0
	}
}

func applyChannelsFirst[F native](C, S, off int, t affine, dy, x, dx []F) {
	plane, pos := off/S, off%S
	for i, n := 0, len(x); i < n; {
		m := min(S-pos, n-i)
		c := plane % C
		a, b, mdy, mu := t.A[c], t.B[c], t.MeanDy[c], t.Mean[c]
		dxRun, xRun := dx[i:i+m], x[i:i+m]
		for j, g := range dy[i : i+m] {
			dxRun[j] = F(a*(float64(g)-mdy) + b*(float64(xRun[j])-mu))
		}
		i += m
		pos = 0
		plane++
	}
}

// applyScale writes dx = A[c]·dy, computed in float64 and rounded to F, for
// the elements at flat indices [off, off+len(dy)): applyAffine's form when B
// and MeanDy are zero, reading neither x nor the mean.
func applyScale[F native](d Dims, off int, A []float64, dy, dx []F) {
	C, S := int(d.C), int(d.S)
	if d.Layout == ChannelsLast {
		c0 := off % C
		for i, n := 0, len(dy); i < n; {
			m := min(C-c0, n-i)
			a, dyRow, dxRow := A[c0:c0+m], dy[i:i+m], dx[i:i+m]
			for j := range dyRow {
				dxRow[j] = F(a[j] * float64(dyRow[j]))
			}
			i += m
			c0 = 0
		}
		return
	}
	plane, pos := off/S, off%S
	for i, n := 0, len(dy); i < n; {
		m := min(S-pos, n-i)
		a := A[plane%C]
		dxRun := dx[i : i+m]
		for j, g := range dy[i : i+m] {
			dxRun[j] = F(a * float64(g))
		}
		i += m
		pos = 0
		plane++
	}
}

// bfloat16Rows reports whether the elements at [lo, hi) of a tensor of T
// with period dims pd are whole channels-last rows of bfloat16 that the
// bfloat16 vector loops take (simdSumsBFloat16), and their row length.
func bfloat16Rows[T Element](pd Dims, lo, hi int) (L int, ok bool) {
	if _, bf := any(*new(T)).(BFloat16); !bf || simdSumsBFloat16 == nil || pd.Layout != ChannelsLast {
		return 0, false
	}
	L = int(pd.C)
	return L, L%16 == 0 && lo%L == 0 && hi%L == 0
}
