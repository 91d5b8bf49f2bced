//go:build goexperiment.simd && amd64

package kernels

import (
	"runtime"
	"simd/archsimd"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// Every vector loop must leave the upper halves of the vector registers
// clear (VZEROUPPER) before scalar code runs: on Intel CPUs each legacy-SSE
// instruction Go emits for scalar float arithmetic otherwise waits on a state
// transition (see simd_amd64.go). The XINUSE bits that XGETBV reports say
// whether they are clear, so this checks it without timing anything.

// requireUpperClear fails the test if the upper halves are in use after what
// ran.
func requireUpperClear(t *testing.T, what string) {
	t.Helper()
	inUse, _ := upperInUse()
	require.False(t, inUse, "%s left the upper halves of the vector registers in use", what)
}

func TestVectorLoopsClearUpperHalves(t *testing.T) {
	if !SIMD() {
		t.Skip("no vector loops on this CPU")
	}
	// The state is the thread's: the goroutine must not move between a loop
	// and its check.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if _, ok := upperInUse(); !ok {
		t.Skip("this CPU does not report XINUSE (XGETBV with ECX = 1)")
	}
	// The probe must see both states, or the checks below prove nothing.
	dirtyUpper()
	inUse, _ := upperInUse()
	archsimd.ClearAVXUpperBits()
	cleared, _ := upperInUse()
	if !inUse || cleared {
		t.Skipf("XINUSE does not follow the AVX state here (after VPCMPEQD Y1: %v; after VZEROUPPER: %v)", inUse, cleared)
	}

	const n = 1024 // a multiple of every vector step, 32-byte aligned below
	f32 := func() []float32 {
		s := make([]float32, n+8)
		for i := range s {
			s[i] = float32(i%13) - 6
		}
		off := 0
		for !aligned32(s[off:]) {
			off++
		}
		return s[off : off+n]
	}
	f64 := func() []float64 { return make([]float64, n) }
	dy, x, dx, a, b, mdy, mu := f32(), f32(), f32(), f32(), f32(), f32(), f32()
	mean, sa, sb := f64(), f64(), f64()
	p32 := func(s []float32) unsafe.Pointer { return unsafe.Pointer(&s[0]) }
	p64 := func(s []float64) unsafe.Pointer { return unsafe.Pointer(&s[0]) }

	forEachLoopSet(func(wide bool, l *rowLoops) {
		name := map[bool]string{false: "AVX2", true: "AVX-512"}[wide]
		l.sums(n/2, p32(dy), p32(x), n/2, p64(mean), p64(sa), p64(sb))
		requireUpperClear(t, name+" sums")
		l.sums2(n/2, p32(dy), p32(x), n/2, p64(mean), p64(sa), p64(sb))
		requireUpperClear(t, name+" sums2")
		l.apply(n/2, p32(dy), p32(x), p32(dx), n/2, p32(a), p32(b), p32(mdy), p32(mu))
		requireUpperClear(t, name+" apply")
		l.apply2(n/2, p32(dy), p32(x), p32(dx), n/2, p32(a), p32(b), p32(mdy), p32(mu))
		requireUpperClear(t, name+" apply2")
		l.scale(n, p32(dy), p32(dx), p32(a))
		requireUpperClear(t, name+" scale")
		l.tile(8, l.tileStep, p32(dy), p32(x), p64(mean), p64(sa), p64(sb))
		requireUpperClear(t, name+" tile")
		l.tile1(8, l.tileStep, p32(dy), p32(x), p64(mean), p64(sa), p64(sb))
		requireUpperClear(t, name+" tile1")
		if wide {
			bf, bx, bd := make([]BFloat16, n), make([]BFloat16, n), make([]BFloat16, n)
			sumsRowsBF16(128, bf, bx, mean, sa, sb)
			requireUpperClear(t, name+" sumsRowsBF16")
			t32 := &affine32{A: a, B: b, MeanDy: mdy, Mean: mu}
			applyRowsBF16(128, t32, bf, bx, bd)
			requireUpperClear(t, name+" applyRowsBF16")
			t32.ScaleOnly = true
			applyRowsBF16(128, t32, bf, bx, bd)
			requireUpperClear(t, name+" applyRowsBF16, scale only")
			widenBFloat16x16(dx[:n-1], bf[:n-1])
			requireUpperClear(t, name+" widenBFloat16x16")
			narrowBFloat16x16(bf[:n-1], dy[:n-1])
			requireUpperClear(t, name+" narrowBFloat16x16")
		}
		bits := make([]uint64, n/64+1)
		simdMaskRows(dx, dy, x, true, bits)
		requireUpperClear(t, name+" simdMaskRows")
		simdUnmaskRows(dx[:n-8], dy[:n-8], bits, 3)
		requireUpperClear(t, name+" simdUnmaskRows")
		lanes, mean32 := make([]float64, planeLanes*3), make([]float32, 3+meanPad)
		bdy, bx, bdx := make([]BFloat16, n), make([]BFloat16, n), make([]BFloat16, n)
		for _, S := range []int{n / 4, 49, 7} {
			simdPlaneLanes(3, S, 0, dy, x, mean32, lanes)
			requireUpperClear(t, name+" simdPlaneLanes")
			simdPlaneLanesBFloat16(3, S, 0, bdy, bx, mean32, lanes)
			requireUpperClear(t, name+" simdPlaneLanesBFloat16")
			for _, scaleOnly := range []bool{false, true} {
				t32 := paddedAffine32(a[:3], b[:3], mdy[:3], mu[:3])
				t32.ScaleOnly = scaleOnly
				simdApplyPlanesBFloat16(3, S, 0, 0, t32, bdy, bx, bdx)
				requireUpperClear(t, name+" simdApplyPlanesBFloat16")
			}
		}
		// Runs with and without a masked tail, at either width.
		for _, S := range []int{n / 4, n/4 - 1, 49, 7} {
			sumsPlanes(3, S, 0, 0, dy, x, mean[:3], sa[:3], sb[:3])
			requireUpperClear(t, name+" sumsPlanes")
			t32 := paddedAffine32(a[:3], b[:3], mdy[:3], mu[:3])
			for _, scaleOnly := range []bool{false, true} {
				t32.ScaleOnly = scaleOnly
				applyPlanes(3, S, 0, 0, t32, dy, x, dx)
				requireUpperClear(t, name+" applyPlanes")
			}
		}
	})
	invStdsVector(mean, a, 1e-3)
	requireUpperClear(t, "invStdsVector")
	addVector(mean, mean)
	requireUpperClear(t, "addVector")
	streamRun(1, 2, 3, 4, dy[:n-1], x[:n-1], dx[:n-1])
	requireUpperClear(t, "streamRun")
	streamApplyRow(n, p32(dy), p32(x), p32(dx), p32(a), p32(b), p32(mdy), p32(mu))
	requireUpperClear(t, "streamApplyRow")
	bf, h := make([]BFloat16, n-1), make([]Half, n-1)
	widenBFloat16(dx[:n-1], bf)
	requireUpperClear(t, "widenBFloat16")
	narrowBFloat16(bf, dy[:n-1])
	requireUpperClear(t, "narrowBFloat16")
	if hasF16C() {
		widenHalf(dx[:n-1], h)
		requireUpperClear(t, "widenHalf")
		narrowHalf(h, dy[:n-1])
		requireUpperClear(t, "narrowHalf")
	}
	for _, layout := range []Layout{ChannelsLast, ChannelsFirst} {
		d := Dims{N: 2, C: 24, S: 37, Layout: layout} // a channel count and runs with tails
		gradsLeaveUpperClear[float32](t, d)
		gradsLeaveUpperClear[Half](t, d)
		gradsLeaveUpperClear[BFloat16](t, d)
	}
}

// gradsLeaveUpperClear runs the training and inference gradients of a
// tensor small enough for the calling goroutine alone, and checks the upper
// halves after each.
func gradsLeaveUpperClear[T Element](t *testing.T, d Dims) {
	n, c := int(d.Len()), int(d.C)
	per := func() []float32 {
		s := make([]float32, c)
		for i := range s {
			s[i] = 1 + float32(i)/8
		}
		return s
	}
	g := FusedGradArgs[T]{
		Dims: d, YBackprop: make([]T, n), X: make([]T, n),
		Scale: per(), ReserveSpace1: per(), ReserveSpace2: per(), Epsilon: 1e-3,
		XBackprop: make([]T, n), ScaleBackprop: make([]float32, c), OffsetBackprop: make([]float32, c),
	}
	leavesUpperClear(t, "TrainingGrad", func() { TrainingGrad(g) })
	leavesUpperClear(t, "InferenceGrad", func() { InferenceGrad(g) })
	ex := FusedGradExArgs[T]{Dims: d, YBackprop: g.YBackprop, X: g.X, Y: make([]T, n), Scale: g.Scale,
		ReserveSpace1: g.ReserveSpace1, ReserveSpace2: g.ReserveSpace2, Offset: g.Scale, Epsilon: g.Epsilon,
		ActivationMode: "Relu", NumSideInputs: 1, IsTraining: true, XBackprop: g.XBackprop,
		ScaleBackprop: g.ScaleBackprop, OffsetBackprop: g.OffsetBackprop, SideInputBackprop: make([]T, n)}
	leavesUpperClear(t, "FusedBatchNormGradEx", func() { FusedBatchNormGradEx(ex) })
	ex.IsTraining = false
	leavesUpperClear(t, "FusedBatchNormGradEx, inference", func() { FusedBatchNormGradEx(ex) })
}

// leavesUpperClear runs grad and checks the upper halves after it, up to
// three times: Go's runtime restores the vector registers of a goroutine it
// preempts asynchronously (asyncPreempt) without VZEROUPPER, so a
// preemption inside the gradient leaves the halves in use by itself (one
// make test's race step met it; a probe spinning 30 ms met it in most
// tries, and in none with GODEBUG=asyncpreemptoff=1). Each try yields
// first, which starts a fresh scheduling slice; a loop that leaves the
// halves in use does so on every try.
func leavesUpperClear(t *testing.T, what string, grad func()) {
	t.Helper()
	for try := 1; ; try++ {
		runtime.Gosched()
		grad()
		if inUse, _ := upperInUse(); inUse && try < 3 {
			t.Logf("%s: try %d left the upper halves in use; again", what, try)
			archsimd.ClearAVXUpperBits()
			continue
		}
		requireUpperClear(t, what)
		return
	}
}
