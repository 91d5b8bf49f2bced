//go:build goexperiment.simd && amd64

package kernels

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"reflect"
	"runtime/debug"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// The channels-first float32 loops against their arithmetic spelled out
// lane by lane in scalar code (runSumsLanes, applyRunLanes), bit for bit:
// each run's sums and each element of dx must be what they are whatever
// the run's length, its offset in its plane and the vector width, so that
// results do not depend on how a tensor is split into blocks or units.

// runSumsLanes returns a run's Σdy and Σdy·(x−mu) as the vector loops form
// them with L float64 lanes (4: AVX2, 8: AVX-512): whole steps of 2L
// elements into two vectors of accumulators, the two added, at AVX-512 the
// vector's halves added, the four lanes added in pairs, then the scalar
// tail; at AVX-512 the tail is the AVX2 form's sums of the rest, added.
func runSumsLanes(L int, dy, x []float32, mu float64) (sumDy, sumDyXc float64) {
	m, j := len(dy), 0
	if m >= 2*L {
		a, b := make([]float64, 2*L), make([]float64, 2*L)
		for ; j+2*L <= m; j += 2 * L {
			for l := range 2 * L {
				g := float64(dy[j+l])
				a[l] += g
				b[l] = math.FMA(g, float64(x[j+l])-mu, b[l])
			}
		}
		var la, lb [4]float64
		for l := range L {
			a[l] += a[L+l]
			b[l] += b[L+l]
		}
		for l := range 4 {
			la[l], lb[l] = a[l], b[l]
			if L == 8 {
				la[l], lb[l] = a[l]+a[l+4], b[l]+b[l+4]
			}
		}
		sumDy = (la[0] + la[1]) + (la[2] + la[3])
		sumDyXc = (lb[0] + lb[1]) + (lb[2] + lb[3])
	}
	if L == 8 {
		s, sx := runSumsLanes(4, dy[j:], x[j:], mu)
		return sumDy + s, sumDyXc + sx
	}
	for ; j < m; j++ {
		g := float64(dy[j])
		sumDy += g
		sumDyXc += g * (float64(x[j]) - mu)
	}
	return sumDy, sumDyXc
}

// applyRunLanes writes a run's dx as the vector loops do at either width,
// whole vectors and the masked tail alike: (dy−mdy)·a + (x−mu)·b rounded
// once (fma32), or dy·a where scaleOnly.
func applyRunLanes(scaleOnly bool, a, b, mdy, mu float32, dy, x, dx []float32) {
	for j := range dy {
		if scaleOnly {
			dx[j] = dy[j] * a
		} else {
			dx[j] = fma32(dy[j]-mdy, a, (x[j]-mu)*b)
		}
	}
}

// paddedAffine32 returns an affine32 of a, b, mdy and mu (of one length)
// laid out as the vector loops need it (layAffine32).
func paddedAffine32(a, b, mdy, mu []float32) *affine32 {
	L := len(a)
	t := layAffine32(make([]float32, 4*L+meanPad), L)
	copy(t.A, a)
	copy(t.B, b)
	copy(t.MeanDy, mdy)
	copy(t.Mean, mu)
	return &t
}

// fma32 returns p·q+r rounded once to float32, from the exact value (in
// float64 it would be rounded twice).
func fma32(p, q, r float32) float32 {
	if v := float64(p)*float64(q) + float64(r); math.IsInf(v, 0) || math.IsNaN(v) {
		return float32(v) // not finite: no rounding to tell apart
	}
	var z, w big.Float
	z.SetPrec(512).SetFloat64(float64(p)).Mul(&z, w.SetFloat64(float64(q)))
	f, _ := z.Add(&z, w.SetFloat64(float64(r))).Float32()
	return f
}

// planeCases calls each(C, S, c, pos, n) for a block of n elements of C
// channels' planes of S elements starting pos into channel c's: runs of
// every length up to 81, started and ended mid-plane, wrapping from the
// last channel to the first.
func planeCases(each func(C, S, c, pos, n int)) {
	const C = 3
	for S := 1; S <= 81; S++ {
		for _, pos := range []int{0, S / 2, S - 1} {
			each(C, S, 0, pos, 0)
			each(C, S, 1, pos, S-pos)       // one run to the plane's end
			each(C, S, 2, pos, (S-pos+1)/2) // one run ending mid-plane
			for _, tail := range []int{0, S / 2} {
				each(C, S, C-1, pos, S-pos+2*S+tail) // wraps to channel 0
			}
		}
	}
}

// planeRuns calls run(c, i, m) for each run of the block planeCases
// described: m elements of channel c from the block's element i.
func planeRuns(C, S, c, pos, n int, run func(c, i, m int)) {
	for i := 0; i < n; {
		m := min(S-pos, n-i)
		run(c, i, m)
		i += m
		pos = 0
		c = (c + 1) % C
	}
}

// randomF32 returns n values from rng, of varied magnitudes.
func randomF32(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(rng.NormFloat64() * math.Exp2(float64(rng.IntN(9)-4)))
	}
	return s
}

func TestChannelsFirstLoopsMatchTheirLanes(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 8))
	forEachLoopSet(func(wide bool, _ *rowLoops) {
		L := map[bool]int{false: f64Lanes, true: f64Lanes512}[wide]
		planeCases(func(C, S, c, pos, n int) {
			dy, x := randomF32(rng, n+8), randomF32(rng, n+8)
			mean := make([]float64, C)
			for k := range mean {
				mean[k] = float64(float32(rng.NormFloat64()))
			}
			// The sums start from earlier blocks' partial sums.
			start := make([]float64, C)
			for k := range start {
				start[k] = rng.NormFloat64()
			}
			wantA, wantB := append([]float64(nil), start...), append([]float64(nil), start...)
			planeRuns(C, S, c, pos, n, func(c, i, m int) {
				a, b := runSumsLanes(L, dy[i:i+m], x[i:i+m], mean[c])
				wantA[c] += a
				wantB[c] += b
			})
			gotA, gotB := append([]float64(nil), start...), append([]float64(nil), start...)
			sumsPlanes(C, S, c, pos, dy[:n], x[:n], mean, gotA, gotB)
			for k := range C {
				require.Equal(t, math.Float64bits(wantA[k]), math.Float64bits(gotA[k]), "wide=%v C=%d S=%d c=%d pos=%d n=%d: Σdy of channel %d", wide, C, S, c, pos, n, k)
				require.Equal(t, math.Float64bits(wantB[k]), math.Float64bits(gotB[k]), "wide=%v C=%d S=%d c=%d pos=%d n=%d: Σdy·(x−mean) of channel %d", wide, C, S, c, pos, n, k)
			}

			aff := paddedAffine32(randomF32(rng, C), randomF32(rng, C), randomF32(rng, C), randomF32(rng, C))
			for _, scaleOnly := range []bool{false, true} {
				aff.ScaleOnly = scaleOnly
				want, got := make([]float32, n+8), make([]float32, n+8)
				for k := range got {
					got[k] = -7 // past n it must stay so
					want[k] = -7
				}
				planeRuns(C, S, c, pos, n, func(c, i, m int) {
					applyRunLanes(scaleOnly, aff.A[c], aff.B[c], aff.MeanDy[c], aff.Mean[c], dy[i:i+m], x[i:i+m], want[i:i+m])
				})
				applyPlanes(C, S, c, pos, aff, dy[:n], x[:n], got[:n])
				for k := range got {
					require.Equal(t, math.Float32bits(want[k]), math.Float32bits(got[k]), "wide=%v C=%d S=%d c=%d pos=%d n=%d scaleOnly=%v: dx[%d]", wide, C, S, c, pos, n, scaleOnly, k)
				}
				// In place, as TensorFlow has the kernels write x_backprop
				// over dy: the AVX-512 loop's runs end in their last
				// vector, loaded before their stores (APPLY_RUNS).
				inPlace := append([]float32(nil), dy[:n]...)
				applyPlanes(C, S, c, pos, aff, inPlace, x[:n], inPlace)
				for k := range inPlace {
					require.Equal(t, math.Float32bits(want[k]), math.Float32bits(inPlace[k]), "wide=%v C=%d S=%d c=%d pos=%d n=%d scaleOnly=%v: dx[%d] in place", wide, C, S, c, pos, n, scaleOnly, k)
				}
			}
		})
	})
}

// planeLanesModel is simdPlaneLanes spelled out lane by lane in scalar
// code, for one run and W float32 lanes (8: AVX2, 16: AVX-512): the lanes
// summed (fma32 for the products) over foldRows steps at most, the tail of
// r < W elements one more step in the last r lanes where the run has W (in
// the first r where it has fewer), the lanes it leaves out adding exactly
// zero; then each lane widened and added to the one W/2 further, and that
// added into the run's channel's float64 lanes la and lb (the first W/2).
func planeLanesModel(W int, la, lb []float64, dy, x []float32, mu float64) {
	m, mu32 := len(dy), float32(mu)
	for j := 0; j < m; {
		sa, sb := make([]float32, W), make([]float32, W)
		k := 0
		step := func(lane0, from, r int) { laneStep(sa, sb, dy, x, lane0, from, r, mu32) }
		for ; k < foldRows && j+W <= m; k++ {
			step(0, j, W)
			j += W
		}
		if k < foldRows && j < m {
			r := m - j
			if m >= W {
				step(W-r, j, r)
			} else {
				step(0, j, r)
			}
			j = m
		}
		for l := range W / 2 {
			la[l] += float64(sa[l]) + float64(sa[l+W/2])
			lb[l] += float64(sb[l]) + float64(sb[l+W/2])
		}
	}
}

// laneStep is one step of the lane models: lanes lane0 to lane0+r of sa
// and sb take dy and dy·(x−mu) of elements from, from+1, ... (fma32 for the
// products); the others add exactly zero.
func laneStep(sa, sb, dy, x []float32, lane0, from, r int, mu float32) {
	for l := range sa {
		g, xc := float32(0), float32(0)
		if l >= lane0 && l < lane0+r {
			g, xc = dy[from+l-lane0], x[from+l-lane0]-mu
		}
		sa[l] += g
		sb[l] = fma32(g, xc, sb[l])
	}
}

// The by-channel plane sums (simdPlaneLanes at either width, and
// reducePlaneLanes) against planeLanesModel, bit for bit: planes of 1 to 81
// elements and longer ones in pieces from the plane's start, blocks that
// start mid-plane, and a channel whose mean is infinite, whose sums the
// masked lanes of its tails must leave as its elements make them (−Inf,
// not NaN).
func TestPlaneLanesMatchTheirModel(t *testing.T) {
	forEachLoopSet(func(wide bool, _ *rowLoops) {
		W := map[bool]int{false: f32Lanes, true: f32Lanes512}[wide]
		testPlaneLanes(t, W)
	})
}

func testPlaneLanes(t *testing.T, W int) {
	rng := rand.New(rand.NewPCG(7, 9))
	const C, N = 3, 3
	for _, S := range append([]int{2047, 2048, 2049, 3136}, seq(1, 81)...) {
		blk := min(S, 2048) // pieces of blk from each plane's start, as byChannelJob.planes
		n := N * C * S
		dy, x := randomF32(rng, n), randomF32(rng, n)
		mean := []float64{float64(float32(rng.NormFloat64())), math.Inf(1), float64(float32(rng.NormFloat64()))}
		for i := S; i < 2*S; i++ {
			dy[i] = float32(1 + rng.Float64()) // channel 1 of sample 0: dy > 0 against an infinite mean
		}
		for i := 4 * S; i < 5*S; i++ {
			dy[i] = float32(1 + rng.Float64()) // and of sample 1
		}
		dy[7*S] = 0 // channel 1 of sample 2 keeps random signs: NaN there is its own
		wantLanes := make([]float64, planeLanes*C)
		lanes := make([]float64, planeLanes*C)
		for p := range N * C {
			c := p % C
			for lo := p * S; lo < (p+1)*S; lo += blk {
				hi := min(lo+blk, (p+1)*S)
				l := wantLanes[planeLanes*c : planeLanes*(c+1)]
				planeLanesModel(W, l[:8], l[8:], dy[lo:hi], x[lo:hi], mean[c])
				simdPlaneLanes(C, S, lo, dy[lo:hi], x[lo:hi], means32(mean), lanes)
			}
		}
		for k := range lanes {
			require.Equal(t, math.Float64bits(wantLanes[k]), math.Float64bits(lanes[k]), "W=%d S=%d lane %d", W, S, k)
		}
		sumDy, sumDyXc := make([]float64, C), make([]float64, C)
		reducePlaneLanes(lanes, 0, C, sumDy, sumDyXc)
		for c := range C {
			l := wantLanes[planeLanes*c:]
			wantA := ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]))
			wantB := ((l[8] + l[12]) + (l[9] + l[13])) + ((l[10] + l[14]) + (l[11] + l[15]))
			require.Equal(t, math.Float64bits(wantA), math.Float64bits(sumDy[c]), "W=%d S=%d channel %d Σdy", W, S, c)
			if !math.IsNaN(wantB) {
				require.Equal(t, math.Float64bits(wantB), math.Float64bits(sumDyXc[c]), "W=%d S=%d channel %d Σdy·(x−mean)", W, S, c)
			}
		}
		// One whole call over every plane, blocks of whole planes where
		// S ≤ blk, gives the same lanes.
		if S <= blk {
			again := make([]float64, planeLanes*C)
			simdPlaneLanes(C, S, 0, dy, x, means32(mean), again)
			for k := range lanes {
				require.Equal(t, math.Float64bits(lanes[k]), math.Float64bits(again[k]), "W=%d S=%d in one call, lane %d", W, S, k)
			}
		}
	}
	// A block that starts mid-plane (the sums of a plane cut by a block
	// boundary start their steps there).
	dy, x := randomF32(rng, 40), randomF32(rng, 40)
	mean := []float64{0.5, -0.25, 1}
	lanes, want := make([]float64, planeLanes*C), make([]float64, planeLanes*C)
	simdPlaneLanes(C, 17, 9, dy[:40], x[:40], means32(mean), lanes)
	planeLanesModel(W, want[0:8], want[8:16], dy[:8], x[:8], mean[0])
	planeLanesModel(W, want[16:24], want[24:32], dy[8:25], x[8:25], mean[1])
	planeLanesModel(W, want[32:40], want[40:48], dy[25:40], x[25:40], mean[2])
	require.Equal(t, want, lanes, "W=%d: a block from element 9 of a plane of 17", W)
	// The channel with the infinite mean: its tails' missing lanes added
	// nothing, so its sums are −Inf where every dy was positive.
	require.True(t, math.IsInf(lanesOfInf(t, rng), -1), "W=%d", W)
}

// lanesOfInf returns Σdy·(x−mean) over one plane of 49 positive dy whose
// channel's mean is +Inf, through simdPlaneLanes.
func lanesOfInf(t *testing.T, rng *rand.Rand) float64 {
	dy, x := randomF32(rng, 49), randomF32(rng, 49)
	for i := range dy {
		dy[i] = float32(1 + rng.Float64())
	}
	lanes := make([]float64, planeLanes)
	simdPlaneLanes(1, 49, 0, dy, x, means32([]float64{math.Inf(1)}), lanes)
	sumDy, sumDyXc := make([]float64, 1), make([]float64, 1)
	reducePlaneLanes(lanes, 0, 1, sumDy, sumDyXc)
	require.False(t, math.IsInf(sumDy[0], 0) || math.IsNaN(sumDy[0]))
	return sumDyXc[0]
}

// means32 returns the means as simdPlaneLanes takes them: float32, and
// meanPad more.
func means32(mean []float64) []float32 {
	m := make([]float32, len(mean)+meanPad)
	for c, v := range mean {
		m[c] = float32(v)
	}
	return m
}

// seq returns lo, lo+1, …, hi.
func seq(lo, hi int) []int {
	s := make([]int, 0, hi-lo+1)
	for i := lo; i <= hi; i++ {
		s = append(s, i)
	}
	return s
}

// The bfloat16 plane loops (simdPlaneLanesBFloat16 and
// simdApplyPlanesBFloat16, at either width, in assembly where the float32
// ones are) against the float32 loops on the widened planes, and
// narrowBFloat16 on their dx, bit for bit: runs of every length up to 81
// started and ended mid-plane, both forms of dx, dx written over dy, and
// elements that round up, tie, overflow to infinity and are NaN.
func TestBFloat16PlanesMatchFloat32Planes(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 13))
	forEachLoopSet(func(wide bool, _ *rowLoops) {
		if wide && planesInAsm {
			inUse := func(f any) uintptr { return reflect.ValueOf(f).Pointer() }
			require.Equal(t, inUse(sumsPlaneLanesBF16Asm512), inUse(simdPlaneLanesBFloat16), "the bfloat16 sums' loop in assembly is not in use")
			require.Equal(t, inUse(applyPlanesBF16Asm512), inUse(simdApplyPlanesBFloat16), "the bfloat16 x_backprop loop in assembly is not in use")
		}
		planeCases(func(C, S, c, pos, n int) {
			dy, x := make([]BFloat16, n), make([]BFloat16, n)
			for i := range n {
				dy[i], x[i] = BFloat16FromFloat32(randomF32(rng, 1)[0]), BFloat16FromFloat32(randomF32(rng, 1)[0])
			}
			if n > 3 {
				dy[1], x[2], dy[n-1] = BFloat16(0x7fc1), BFloat16(0x7f80), BFloat16(0xff7f) // NaN, +Inf, -max
			}
			dy32, x32 := make([]float32, n), make([]float32, n)
			widen(dy32, dy)
			widen(x32, x)
			// The sums, from a plane's start (as units run them) whatever pos.
			mean := make([]float32, C+meanPad)
			for k := range C {
				mean[k] = float32(rng.NormFloat64())
			}
			off := c*S + pos
			want, got := make([]float64, planeLanes*C), make([]float64, planeLanes*C)
			simdPlaneLanes(C, S, off, dy32, x32, mean, want)
			simdPlaneLanesBFloat16(C, S, off, dy, x, mean, got)
			for k := range want {
				require.Equal(t, math.Float64bits(want[k]), math.Float64bits(got[k]), "wide=%v C=%d S=%d c=%d pos=%d n=%d: lane %d", wide, C, S, c, pos, n, k)
			}
			aff := paddedAffine32(randomF32(rng, C), randomF32(rng, C), randomF32(rng, C), randomF32(rng, C))
			aff.A[0] = 3e38                // dx overflows to infinity
			const guard = BFloat16(0x7777) // past n it must stay so
			guarded := func(v []BFloat16) []BFloat16 {
				g := make([]BFloat16, n+16)
				copy(g, v)
				for k := n; k < len(g); k++ {
					g[k] = guard
				}
				return g
			}
			for _, scaleOnly := range []bool{false, true} {
				aff.ScaleOnly = scaleOnly
				dx32, wantDx := make([]float32, n), make([]BFloat16, n)
				applyPlanes(C, S, c, pos, aff, dy32, x32, dx32)
				simdNarrowBFloat16(wantDx, dx32)
				gotDx := guarded(nil)
				simdApplyPlanesBFloat16(C, S, c, pos, aff, dy, x, gotDx[:n])
				require.Equal(t, guarded(wantDx), gotDx, "wide=%v C=%d S=%d c=%d pos=%d n=%d scaleOnly=%v", wide, C, S, c, pos, n, scaleOnly)
				inPlace := guarded(dy)
				simdApplyPlanesBFloat16(C, S, c, pos, aff, inPlace[:n], x, inPlace[:n])
				require.Equal(t, guarded(wantDx), inPlace, "wide=%v C=%d S=%d c=%d pos=%d n=%d scaleOnly=%v, dx over dy", wide, C, S, c, pos, n, scaleOnly)
			}
		})
	})
}

// TestScaleOnlyPlanesLeaveXUnread: the scale-only planes (inference's
// x_backprop, dy·a) do not read x, at either width: x lies in memory that
// faults on any read, which the affine form (reading it) shows.
func TestScaleOnlyPlanesLeaveXUnread(t *testing.T) {
	mem, err := syscall.Mmap(-1, 0, 1<<16, syscall.PROT_NONE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	require.NoError(t, err)
	defer syscall.Munmap(mem)
	x := unsafe.Slice((*float32)(unsafe.Pointer(&mem[0])), 1000)
	dy, dx := make([]float32, 1000), make([]float32, 1000)
	faults := func(scaleOnly bool) (faulted bool) {
		aff := paddedAffine32(make([]float32, 4), make([]float32, 4), make([]float32, 4), make([]float32, 4))
		aff.ScaleOnly = scaleOnly
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() { faulted = recover() != nil }()
		applyPlanes(4, 250, 0, 0, aff, dy, x, dx)
		return false
	}
	forEachLoopSet(func(wide bool, _ *rowLoops) {
		require.False(t, faults(true), "wide=%v: the scale-only planes read x", wide)
		require.True(t, faults(false), "wide=%v: the affine planes left x unread (the mapping does not fault)", wide)
	})
}

// TestPlaneTailsReadNoFurther: the plane loops, float32 and bfloat16 at
// either width, read and write nothing past their slices: each slice ends
// where a page that faults on any access begins, and the runs' tails are
// shorter than a vector.
func TestPlaneTailsReadNoFurther(t *testing.T) {
	const page = 1 << 12
	mem, err := syscall.Mmap(-1, 0, 8*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	require.NoError(t, err)
	defer syscall.Munmap(mem)
	for p := 1; p < 8; p += 2 { // pages 1, 3, 5 and 7 fault
		require.NoError(t, syscall.Mprotect(mem[p*page:(p+1)*page], syscall.PROT_NONE))
	}
	const C, S = 3, 21
	endingAt := func(p, n, size int) unsafe.Pointer { return unsafe.Pointer(&mem[(p+1)*page-n*size]) }
	forEachLoopSet(func(wide bool, _ *rowLoops) {
		for _, n := range []int{5, 21, 37, 47} {
			f32 := func(p int) []float32 { return unsafe.Slice((*float32)(endingAt(p, n, 4)), n) }
			b16 := func(p int) []BFloat16 { return unsafe.Slice((*BFloat16)(endingAt(p, n, 2)), n) }
			aff := paddedAffine32(make([]float32, C), make([]float32, C), make([]float32, C), make([]float32, C))
			mean, lanes := make([]float32, C+meanPad), make([]float64, planeLanes*C)
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("wide=%v n=%d: a plane loop touched the page past its slice: %v", wide, n, r)
					}
				}()
				defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
				simdPlaneLanes(C, S, 0, f32(0), f32(2), mean, lanes)
				applyPlanes(C, S, 0, 0, aff, f32(0), f32(2), f32(4))
				simdPlaneLanesBFloat16(C, S, 0, b16(0), b16(2), mean, lanes)
				simdApplyPlanesBFloat16(C, S, 0, 0, aff, b16(0), b16(2), b16(4))
				if simdChannelLanes != nil {
					// Two channels of planes of n/2 elements (18 and 23
					// of the last two: a masked last vector), one sample.
					simdChannelLanes(1, 2, n/2, 0, 2, f32(0)[n%2:], f32(2)[n%2:], mean, lanes)
				}
			}()
		}
	})
}

// BenchmarkApplyPlanes times the channels-first x_backprop loop alone
// (applyChannelsFirst32) on 7x7 and 14x14 planes of 512 channels, in L2
// and past it, with x_backprop in a buffer of its own and written over dy,
// as TensorFlow has the kernels do where nothing else reads dy: the runs'
// tails are stored differently in place (APPLY_RUNS in planes_amd64.h).
func BenchmarkApplyPlanes(b *testing.B) {
	const C = 512
	for _, S := range []int{49, 196} {
		for _, N := range []int{1, 2, 8} {
			d := Dims{N: int64(N), C: C, S: int64(S), Layout: ChannelsFirst}
			n := N * C * S
			dy, x, dx := make([]float32, n), make([]float32, n), make([]float32, n)
			for i := range dy {
				dy[i], x[i] = float32(i%7), float32(i%5)
			}
			sc := getScratch()
			t := newAffine(sc, make([]float64, C))
			for c := range C {
				t.A[c], t.B[c], t.MeanDy[c] = 1, 2, 3
			}
			t = t.withFloat32(sc)
			for _, inPlace := range []bool{false, true} {
				out := dx
				if inPlace {
					out = dy
				}
				name := map[bool]string{false: "own", true: "inPlace"}[inPlace]
				b.Run(fmt.Sprintf("%dx%dx%d/%s", d.N, d.C, d.S, name), func(b *testing.B) {
					b.SetBytes(int64(12 * n))
					for b.Loop() {
						applyChannelsFirst32(C, S, 0, t.f32, dy, x, out)
					}
				})
			}
		}
	}
}

// channelLanesModel is sumsChannelLanesRuns512 spelled out lane by lane in
// scalar code for one channel: its planes (dy[k], x[k]) one after the
// other through sixteen float32 lanes, each plane's tail of r < 16
// elements one step more in the last r lanes where the plane has 16 or
// more (the first r where it has fewer); every foldRows steps, and after
// the last plane, each lane widened and added to the one eight further,
// and that added into la and lb.
func channelLanesModel(la, lb []float64, dy, x [][]float32, mu float64) {
	const W = f32Lanes512
	mu32 := float32(mu)
	sa, sb := make([]float32, W), make([]float32, W)
	steps := 0
	fold := func() {
		for l := range W / 2 {
			la[l] += float64(sa[l]) + float64(sa[l+W/2])
			lb[l] += float64(sb[l]) + float64(sb[l+W/2])
		}
		clear(sa)
		clear(sb)
		steps = 0
	}
	step := func(d, v []float32, lane0, from, r int) {
		laneStep(sa, sb, d, v, lane0, from, r, mu32)
		if steps++; steps == foldRows {
			fold()
		}
	}
	for k := range dy {
		m, j := len(dy[k]), 0
		for ; j+W <= m; j += W {
			step(dy[k], x[k], 0, j, W)
		}
		if r := m - j; r > 0 {
			if m >= W {
				step(dy[k], x[k], W-r, j, r)
			} else {
				step(dy[k], x[k], 0, j, r)
			}
		}
	}
	if steps > 0 {
		fold()
	}
}

// The channel-major plane sums (sumsChannelLanesAsm512) against
// channelLanesModel, bit for bit: planes of 1 to 81 elements and of 196
// and 3136, one to five samples, the unit's channels a part of C, the
// lanes starting from earlier sums.
func TestChannelLanesMatchTheirModel(t *testing.T) {
	if !planesInAsm {
		t.Skip("the AVX-512 assembly loops need AVX-512 and BMI2")
	}
	rng := rand.New(rand.NewPCG(11, 13))
	const C = 4
	for _, S := range append([]int{196, 3136}, seq(1, 81)...) {
		for _, N := range []int{1, 2, 5} {
			dy, x := randomF32(rng, N*C*S), randomF32(rng, N*C*S)
			mean := make([]float64, C)
			for c := range mean {
				mean[c] = float64(float32(rng.NormFloat64()))
			}
			start := make([]float64, planeLanes*C)
			for k := range start {
				start[k] = rng.NormFloat64()
			}
			c0, c1 := 1, 3
			want, got := append([]float64(nil), start...), append([]float64(nil), start...)
			for c := c0; c < c1; c++ {
				var pdy, px [][]float32
				for n := range N {
					o := (n*C + c) * S
					pdy, px = append(pdy, dy[o:o+S]), append(px, x[o:o+S])
				}
				l := want[planeLanes*c : planeLanes*(c+1)]
				channelLanesModel(l[:8], l[8:], pdy, px, mean[c])
			}
			sumsChannelLanesAsm512(N, C, S, c0, c1, dy, x, means32(mean), got)
			for k := range got {
				require.Equal(t, math.Float64bits(want[k]), math.Float64bits(got[k]), "S=%d N=%d lane %d", S, N, k)
			}
		}
	}
}
