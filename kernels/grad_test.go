package kernels_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/kernels"
)

// ---------------------------------------------------------------------------
// Element helpers: conversions, bits and sentinels, written against the public
// API only.

// toF64 returns v as a float64 (exact for every element type).
func toF64[T kernels.Element](v T) float64 {
	switch v := any(v).(type) {
	case float32:
		return float64(v)
	case float64:
		return v
	case kernels.Half:
		return float64(v.Float32())
	case kernels.BFloat16:
		return float64(v.Float32())
	}
	panic("unreachable")
}

// fromF64 rounds v to T. For Half and BFloat16 it rounds through float32,
// which may differ from a direct rounding by one ulp of T.
func fromF64[T kernels.Element](v float64) T {
	var z T
	switch any(z).(type) {
	case float32:
		return any(float32(v)).(T)
	case float64:
		return any(v).(T)
	case kernels.Half:
		return any(kernels.HalfFromFloat32(float32(v))).(T)
	case kernels.BFloat16:
		return any(kernels.BFloat16FromFloat32(float32(v))).(T)
	}
	panic("unreachable")
}

// bitsOf returns v's bit pattern, so that NaN payloads and signed zeros compare.
func bitsOf[T kernels.Element](v T) uint64 {
	switch v := any(v).(type) {
	case float32:
		return uint64(math.Float32bits(v))
	case float64:
		return math.Float64bits(v)
	case kernels.Half:
		return uint64(v)
	case kernels.BFloat16:
		return uint64(v)
	}
	panic("unreachable")
}

// sentinel returns a NaN with an unusual payload that no kernel computes.
func sentinel[T kernels.Element]() T {
	var z T
	switch any(z).(type) {
	case float32:
		return any(math.Float32frombits(0x7fc12345)).(T)
	case float64:
		return any(math.Float64frombits(0x7ff8000012345678)).(T)
	case kernels.Half:
		return any(kernels.Half(0x7d2b)).(T)
	case kernels.BFloat16:
		return any(kernels.BFloat16(0x7f9b)).(T)
	}
	panic("unreachable")
}

func typeName[T kernels.Element]() string {
	var z T
	switch any(z).(type) {
	case kernels.Half:
		return "Half"
	case kernels.BFloat16:
		return "BFloat16"
	}
	return fmt.Sprintf("%T", z)
}

// ordered maps the non-NaN values of T to integers in the same order, with
// adjacent values adjacent (both zeros map to 0).
func ordered[T kernels.Element](v T) int64 {
	var bits, signBit uint64
	switch v := any(v).(type) {
	case float32:
		bits, signBit = uint64(math.Float32bits(v)), 1<<31
	case float64:
		bits, signBit = math.Float64bits(v), 1<<63
	case kernels.Half:
		bits, signBit = uint64(v), 1<<15
	case kernels.BFloat16:
		bits, signBit = uint64(v), 1<<15
	}
	if bits&signBit != 0 {
		return -int64(bits &^ signBit)
	}
	return int64(bits)
}

func widenAll[T kernels.Element](s []T) []float64 {
	out := make([]float64, len(s))
	for i, v := range s {
		out[i] = toF64(v)
	}
	return out
}

func widen32(s []float32) []float64 {
	out := make([]float64, len(s))
	for i, v := range s {
		out[i] = float64(v)
	}
	return out
}

// guarded is an output slice with guard elements on both sides.
type guarded[T kernels.Element] struct {
	full  []T
	inner []T
}

const guardLen = 7

// newGuarded returns n elements with guardLen sentinels on each side; the n
// inner elements are sentinels too, so that a test can check they were all
// overwritten.
func newGuarded[T kernels.Element](n int) guarded[T] {
	full := make([]T, n+2*guardLen)
	for i := range full {
		full[i] = sentinel[T]()
	}
	// The inner slice keeps the guards in its capacity, as gonum's guarded
	// slices do, so that a kernel reslicing past its length writes into them.
	return guarded[T]{full: full, inner: full[guardLen : guardLen+n]}
}

// check reports writes outside the inner slice and inner elements left
// unwritten.
func (g guarded[T]) check(t *testing.T, name string) {
	t.Helper()
	s := bitsOf(sentinel[T]())
	n := len(g.inner)
	for i := range guardLen {
		if bitsOf(g.full[i]) != s {
			t.Errorf("%s: guard before the output overwritten at offset %d", name, i-guardLen)
		}
		if bitsOf(g.full[guardLen+n+i]) != s {
			t.Errorf("%s: guard after the output overwritten at offset %d", name, n+i)
		}
	}
	for i, v := range g.inner {
		if bitsOf(v) == s {
			t.Errorf("%s[%d] not written", name, i)
			return
		}
	}
}

// requireUnchanged fails if got and want differ in any bit.
func requireUnchanged[T kernels.Element](t *testing.T, name string, got, want []T) {
	t.Helper()
	require.Equal(t, len(want), len(got), "%s length changed", name)
	for i := range want {
		if bitsOf(got[i]) != bitsOf(want[i]) {
			t.Fatalf("input %s modified at %d: %v, was %v", name, i, got[i], want[i])
		}
	}
}

// sameSpecial reports whether got and want agree on being NaN, +Inf or -Inf.
// Both must be one of those for ok to be true; special is false when neither
// is special.
func sameSpecial(got, want float64) (special, ok bool) {
	gotSpecial := math.IsNaN(got) || math.IsInf(got, 0)
	wantSpecial := math.IsNaN(want) || math.IsInf(want, 0)
	if !gotSpecial && !wantSpecial {
		return false, true
	}
	if math.IsNaN(want) {
		return true, math.IsNaN(got)
	}
	return true, got == want
}

func isFinite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// maxAbsFinite returns max |v| over the finite v.
func maxAbsFinite(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			m = max(m, math.Abs(x))
		}
	}
	return m
}

// assertClose checks |got−want| ≤ rel·max|want| elementwise, NaN-aware: a
// NaN must meet a NaN and an infinity the same infinity.
func assertClose(t *testing.T, name string, got, want []float64, rel float64) {
	t.Helper()
	assertCloseScaled(t, name, got, want, rel, 0)
}

// assertCloseScaled is assertClose with the tolerance rel·max(max|want|,
// magnitude), for outputs that are small differences of larger terms.
func assertCloseScaled(t *testing.T, name string, got, want []float64, rel, magnitude float64) {
	t.Helper()
	require.Equal(t, len(want), len(got), "%s length", name)
	tol := rel * max(maxAbsFinite(want), magnitude)
	bad := 0
	for i := range want {
		if special, ok := sameSpecial(got[i], want[i]); special {
			if !ok {
				t.Errorf("%s[%d] = %v, want %v", name, i, got[i], want[i])
				bad++
			}
		} else if math.Abs(got[i]-want[i]) > tol {
			t.Errorf("%s[%d] = %v, want %v (|diff| %.3g > tol %.3g)", name, i, got[i], want[i], math.Abs(got[i]-want[i]), tol)
			bad++
		}
		if bad >= 10 {
			t.Fatalf("%s: too many mismatches", name)
		}
	}
}

// assertWithinOneULP checks that got is within one ulp of T of want rounded
// to T, NaN-aware.
//
// Kernels may form x_backprop in float32 before rounding to T (DESIGN: "compute
// in float32 or better"), which is exact to a few float32 ulps of the terms,
// not of the result. So got may also be within one ulp of the rounding of any
// value within slack = 1e-6·magnitude (about 8 float32 ulps) of want. With
// magnitude 0 this is the plain one-ulp check.
func assertWithinOneULP[T kernels.Element](t *testing.T, name string, got []T, want []float64, magnitude float64) {
	t.Helper()
	require.Equal(t, len(want), len(got), "%s length", name)
	slack := 1e-6 * magnitude
	bad := 0
	for i := range want {
		g := toF64(got[i])
		if math.IsNaN(g) || math.IsNaN(want[i]) {
			if !math.IsNaN(g) || !math.IsNaN(want[i]) {
				t.Errorf("%s[%d] = %v, want %v", name, i, g, want[i])
				bad++
			}
			continue
		}
		w := fromF64[T](want[i])
		lo, hi := ordered(fromF64[T](want[i]-slack))-1, ordered(fromF64[T](want[i]+slack))+1
		if o := ordered(got[i]); o < lo || o > hi {
			t.Errorf("%s[%d] = %v, want %v (%v rounded): more than one ulp off", name, i, g, toF64(w), want[i])
			bad++
		}
		if bad >= 10 {
			t.Fatalf("%s: too many mismatches", name)
		}
	}
}

// assertActivation compares an activation-shaped output with its float64
// reference under T's tolerance: 1e-12 (float64) or 1e-5 (float32) relative
// to max(max|want|, magnitude), or one ulp of Half and BFloat16 (see
// assertWithinOneULP for the slack float32 computation needs). magnitude is
// the size of the terms whose difference the output is (0 if none): the
// training x_backprop of a batch of one element per channel is exactly zero
// in exact arithmetic and rounding noise of the size of its terms otherwise.
func assertActivation[T kernels.Element](t *testing.T, name string, got []T, want []float64, magnitude float64) {
	t.Helper()
	var z T
	switch any(z).(type) {
	case float64:
		assertCloseScaled(t, name, widenAll(got), want, 1e-12, magnitude)
	case float32:
		assertCloseScaled(t, name, widenAll(got), want, 1e-5, magnitude)
	default:
		assertWithinOneULP(t, name, got, want, magnitude)
	}
}

// ---------------------------------------------------------------------------
// The naive float64 reference, written from the doc comments of grad.go with
// explicit index arithmetic.

// index returns the flat index of element (n, c, s).
func index(layout kernels.Layout, C, S, n, c, s int) int {
	if layout == kernels.ChannelsLast {
		return (n*S+s)*C + c
	}
	return (n*C+c)*S + s
}

type fusedReference struct {
	xBackprop, scaleBackprop, offsetBackprop []float64
	// xBackpropMagnitude is the largest finite sum of the absolute values of
	// the terms of an x_backprop.
	xBackpropMagnitude float64
}

// referenceFusedGrad computes FusedBatchNormGrad's outputs in float64. With
// R = N·S, c = 1/sqrt(σ²+ε) and sums over a channel:
//
//	offset_backprop = Σ dy
//	scale_backprop  = c · Σ dy·(x−μ)
//	x_backprop      = scale·c · (dy − Σdy/R − (x−μ)·c²·Σ dy·(x−μ) / R)   (training)
//	x_backprop      = dy · scale · c                                     (inference)
func referenceFusedGrad(training bool, layout kernels.Layout, N, C, S int, dy, x, scale, mean, variance []float64, epsilon float64) fusedReference {
	out := fusedReference{
		xBackprop:      make([]float64, N*C*S),
		scaleBackprop:  make([]float64, C),
		offsetBackprop: make([]float64, C),
	}
	R := float64(N * S)
	for c := range C {
		var sumDy, sumDyXc float64
		for n := range N {
			for s := range S {
				i := index(layout, C, S, n, c, s)
				sumDy += dy[i]
				sumDyXc += dy[i] * (x[i] - mean[c])
			}
		}
		inv := 1 / math.Sqrt(variance[c]+epsilon)
		out.offsetBackprop[c] = sumDy
		out.scaleBackprop[c] = inv * sumDyXc
		for n := range N {
			for s := range S {
				i := index(layout, C, S, n, c, s)
				var magnitude float64
				if training {
					out.xBackprop[i] = scale[c] * inv * (dy[i] - sumDy/R - (x[i]-mean[c])*inv*inv*sumDyXc/R)
					magnitude = math.Abs(scale[c]*inv) * (math.Abs(dy[i]) + math.Abs(sumDy/R) + math.Abs((x[i]-mean[c])*inv*inv*sumDyXc/R))
				} else {
					out.xBackprop[i] = dy[i] * scale[c] * inv
					magnitude = math.Abs(out.xBackprop[i])
				}
				if isFinite(magnitude) {
					out.xBackpropMagnitude = max(out.xBackpropMagnitude, magnitude)
				}
			}
		}
	}
	return out
}

type globalReference struct {
	dx, dm, dv, db, dg []float64
}

// referenceGlobalGrad computes BatchNormWithGlobalNormalizationGrad's outputs
// in float64, channels last. With s = 1/sqrt(v+ε), γ' = γ when
// scaleAfterNormalization and 1 otherwise:
//
//	db = Σ dy,  dx = dy·s·γ',  dm = −db·s·γ',
//	dg = s·Σ dy·(t−m) (0 without scaling),  dv = −½·s³·γ'·Σ dy·(t−m)
func referenceGlobalGrad(N, C, S int, t, dy, m, v, gamma []float64, epsilon float64, scaleAfterNormalization bool) globalReference {
	out := globalReference{
		dx: make([]float64, N*C*S),
		dm: make([]float64, C), dv: make([]float64, C), db: make([]float64, C), dg: make([]float64, C),
	}
	for c := range C {
		var sumDy, sumDyXc float64
		for n := range N {
			for s := range S {
				i := index(kernels.ChannelsLast, C, S, n, c, s)
				sumDy += dy[i]
				sumDyXc += dy[i] * (t[i] - m[c])
			}
		}
		s := 1 / math.Sqrt(v[c]+epsilon)
		g := 1.0
		if scaleAfterNormalization {
			g = gamma[c]
			out.dg[c] = s * sumDyXc
		}
		out.db[c] = sumDy
		out.dm[c] = -sumDy * s * g
		out.dv[c] = -0.5 * s * s * s * g * sumDyXc
		for n := range N {
			for si := range S {
				i := index(kernels.ChannelsLast, C, S, n, c, si)
				out.dx[i] = dy[i] * s * g
			}
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// Cases.

type shapeCase struct {
	name    string
	N, C, S int
}

// shapeCases covers the edge shapes of STYLE item 8. The last two are large
// enough (N·C·S > 2·65536) for the kernels to split the work over goroutines
// when GOMAXPROCS > 1; the odd sizes put the split points in the middle of a
// channel row (channels last) and of a channel plane (channels first).
var shapeCases = []shapeCase{
	{"N=1", 1, 5, 6},
	{"C=1", 4, 1, 9},
	{"R=1", 1, 4, 1},
	{"R=1 C=1", 1, 1, 1},
	{"C=3", 3, 3, 17},
	{"C=13", 2, 13, 31},
	{"C=70", 2, 70, 25},
	{"C=64", 5, 64, 7},       // channels-last rows of C, four at a time
	{"C=100", 3, 100, 9},     // channels-last period 200
	{"C=513", 2, 513, 11},    // rows of C with a scalar tail
	{"C=2048", 3, 2048, 5},   // blocks of four rows
	{"C=20000", 1, 20000, 3}, // rows longer than a block
	{"S=1", 9, 11, 1},
	{"block boundaries", 3, 7, 1111}, // 23331 elements: Half and BFloat16 convert in blocks of 2048
	{"empty batch", 0, 5, 7},
	{"zero spatial", 3, 5, 0},
	{"zero channels", 2, 0, 9},
	{"parallel N=4 C=37 S=1000", 4, 37, 1000},
	{"parallel odd split", 1, 37, 4001},
	{"parallel C=64", 2, 64, 1100},
	{"parallel C=1024", 1, 1024, 150}, // inference in two passes (channels last)
}

var layouts = []struct {
	name   string
	layout kernels.Layout
}{
	{"ChannelsLast", kernels.ChannelsLast},
	{"ChannelsFirst", kernels.ChannelsFirst},
}

func isParallel(sc shapeCase) bool { return sc.N*sc.C*sc.S > 2*65536 }

// randomActivation returns n values drawn from N(mean, std²), rounded to T.
func randomActivation[T kernels.Element](rng *rand.Rand, n int, mean, std float64) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = fromF64[T](mean + std*rng.NormFloat64())
	}
	return out
}

func randomVector(rng *rand.Rand, n int, lo, hi float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(lo + (hi-lo)*rng.Float64())
	}
	return out
}

// fusedInputs holds a fused-gradient problem in T.
type fusedInputs[T kernels.Element] struct {
	dims                  kernels.Dims
	dy, x                 []T
	scale, mean, variance []float32
	epsilon               float32
}

// newFusedInputs draws a problem; in training mode the mean and biased
// variance are those of x (as the forward op saves them), rounded to float32.
func newFusedInputs[T kernels.Element](rng *rand.Rand, training bool, layout kernels.Layout, sc shapeCase) fusedInputs[T] {
	n := sc.N * sc.C * sc.S
	in := fusedInputs[T]{
		dims:     kernels.Dims{N: int64(sc.N), C: int64(sc.C), S: int64(sc.S), Layout: layout},
		dy:       randomActivation[T](rng, n, 0, 1),
		x:        make([]T, n),
		scale:    randomVector(rng, sc.C, -2, 2),
		mean:     randomVector(rng, sc.C, -1, 1),
		variance: randomVector(rng, sc.C, 0.25, 4),
		epsilon:  1e-3,
	}
	// x varies by channel so that channel mix-ups show.
	for c := range sc.C {
		center, spread := 3*rng.NormFloat64(), 0.5+rng.Float64()
		for nn := range sc.N {
			for s := range sc.S {
				in.x[index(layout, sc.C, sc.S, nn, c, s)] = fromF64[T](center + spread*rng.NormFloat64())
			}
		}
	}
	if training && sc.N*sc.S > 0 {
		R := float64(sc.N * sc.S)
		for c := range sc.C {
			var sum float64
			for nn := range sc.N {
				for s := range sc.S {
					sum += toF64(in.x[index(layout, sc.C, sc.S, nn, c, s)])
				}
			}
			mu := sum / R
			var ss float64
			for nn := range sc.N {
				for s := range sc.S {
					d := toF64(in.x[index(layout, sc.C, sc.S, nn, c, s)]) - mu
					ss += d * d
				}
			}
			in.mean[c], in.variance[c] = float32(mu), float32(ss/R)
		}
	}
	return in
}

// runFused runs TrainingGrad or InferenceGrad on in with guarded outputs,
// checks guards and that inputs are unchanged, and returns the outputs.
func runFused[T kernels.Element](t *testing.T, training bool, in fusedInputs[T]) (dx []T, scaleBackprop, offsetBackprop []float32) {
	t.Helper()
	n, C := len(in.x), len(in.scale)
	xBackprop := newGuarded[T](n)
	scaleBp, offsetBp := newGuarded[float32](C), newGuarded[float32](C)
	saved := struct {
		dy, x                 []T
		scale, mean, variance []float32
	}{
		append([]T(nil), in.dy...), append([]T(nil), in.x...),
		append([]float32(nil), in.scale...), append([]float32(nil), in.mean...), append([]float32(nil), in.variance...),
	}
	args := kernels.FusedGradArgs[T]{
		Dims:           in.dims,
		YBackprop:      in.dy,
		X:              in.x,
		Scale:          in.scale,
		ReserveSpace1:  in.mean,
		ReserveSpace2:  in.variance,
		Epsilon:        in.epsilon,
		XBackprop:      xBackprop.inner,
		ScaleBackprop:  scaleBp.inner,
		OffsetBackprop: offsetBp.inner,
	}
	if training {
		kernels.TrainingGrad(args)
	} else {
		kernels.InferenceGrad(args)
	}
	xBackprop.check(t, "x_backprop")
	scaleBp.check(t, "scale_backprop")
	offsetBp.check(t, "offset_backprop")
	requireUnchanged(t, "y_backprop", in.dy, saved.dy)
	requireUnchanged(t, "x", in.x, saved.x)
	requireUnchanged(t, "scale", in.scale, saved.scale)
	requireUnchanged(t, "reserve_space_1", in.mean, saved.mean)
	requireUnchanged(t, "reserve_space_2", in.variance, saved.variance)
	return xBackprop.inner, scaleBp.inner, offsetBp.inner
}

// reference computes the float64 reference from the inputs as the kernel
// sees them (already rounded to T and float32).
func (in fusedInputs[T]) reference(training bool) fusedReference {
	d := in.dims
	return referenceFusedGrad(training, d.Layout, int(d.N), int(d.C), int(d.S),
		widenAll(in.dy), widenAll(in.x), widen32(in.scale), widen32(in.mean), widen32(in.variance), float64(in.epsilon))
}

// checkFused runs in through runFused and checks the outputs against the
// float64 reference: x_backprop within assertActivation's bounds, the 1-D
// outputs within rel. It returns the 1-D outputs.
func checkFused[T kernels.Element](t *testing.T, training bool, in fusedInputs[T], rel float64) (scaleBackprop, offsetBackprop []float32) {
	t.Helper()
	dx, scaleBp, offsetBp := runFused(t, training, in)
	want := in.reference(training)
	assertActivation(t, "x_backprop", dx, want.xBackprop, want.xBackpropMagnitude)
	assertClose(t, "scale_backprop", widen32(scaleBp), want.scaleBackprop, rel)
	assertClose(t, "offset_backprop", widen32(offsetBp), want.offsetBackprop, rel)
	return scaleBp, offsetBp
}

func testFusedGrad[T kernels.Element](t *testing.T, training bool) {
	rng := rand.New(rand.NewPCG(20240601, uint64(len(typeName[T]()))))
	for _, sc := range shapeCases {
		for _, l := range layouts {
			t.Run(fmt.Sprintf("%s/%s", sc.name, l.name), func(t *testing.T) {
				if isParallel(sc) {
					t.Logf("N·C·S = %d with GOMAXPROCS = %d", sc.N*sc.C*sc.S, runtime.GOMAXPROCS(0))
				}
				scaleBp, offsetBp := checkFused(t, training, newFusedInputs[T](rng, training, l.layout, sc), 1e-5)
				if sc.N*sc.S == 0 {
					for c := range sc.C {
						assert.Zero(t, scaleBp[c], "scale_backprop[%d] of an empty batch", c)
						assert.Zero(t, offsetBp[c], "offset_backprop[%d] of an empty batch", c)
					}
				}
			})
		}
	}
}

func TestTrainingGrad(t *testing.T) {
	t.Run("float32", func(t *testing.T) { testFusedGrad[float32](t, true) })
	t.Run("float64", func(t *testing.T) { testFusedGrad[float64](t, true) })
	t.Run("Half", func(t *testing.T) { testFusedGrad[kernels.Half](t, true) })
	t.Run("BFloat16", func(t *testing.T) { testFusedGrad[kernels.BFloat16](t, true) })
}

// TestTrainingGradArbitraryStatistics feeds TrainingGrad a mean and variance
// that are not those of x: the formula holds for any μ and σ².
func TestTrainingGradArbitraryStatistics(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			checkFused(t, true, newFusedInputs[float64](rng, false, l.layout, shapeCase{"", 3, 13, 21}), 1e-6)
		})
	}
}

func TestInferenceGrad(t *testing.T) {
	t.Run("float32", func(t *testing.T) { testFusedGrad[float32](t, false) })
	t.Run("float64", func(t *testing.T) { testFusedGrad[float64](t, false) })
	t.Run("Half", func(t *testing.T) { testFusedGrad[kernels.Half](t, false) })
	t.Run("BFloat16", func(t *testing.T) { testFusedGrad[kernels.BFloat16](t, false) })
}

// TestFusedGradWorkerSplits runs the parallel path with a set number of
// workers (GOMAXPROCS may exceed the machine's cores), on sizes just over
// procs·65536 elements so that every worker gets work, with odd S so that the
// split points fall inside channel rows and planes.
func TestFusedGradWorkerSplits(t *testing.T) {
	for _, tc := range []struct {
		procs int
		S     int
	}{{2, 10083}, {3, 15131}, {5, 25229}} {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", tc.procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(tc.procs))
			rng := rand.New(rand.NewPCG(7, uint64(tc.procs)))
			sc := shapeCase{"", 1, 13, tc.S}
			require.Greater(t, sc.N*sc.C*sc.S, tc.procs*65536)
			for _, l := range layouts {
				for _, training := range []bool{true, false} {
					t.Run(fmt.Sprintf("%s/training=%v", l.name, training), func(t *testing.T) {
						kernels.ResetSplitStats()
						checkFused(t, training, newFusedInputs[float32](rng, training, l.layout, sc), 1e-5)
						// The case split: procs ranges at least, one worker
						// per range up to the cores and GOMAXPROCS.
						calls, ranges, workers := kernels.SplitStats()
						require.Positive(t, calls, "the case ran on one range")
						require.GreaterOrEqual(t, ranges, tc.procs)
						require.Equal(t, min(runtime.NumCPU(), tc.procs, ranges), workers)
						if training {
							checkFused(t, training, newFusedInputs[kernels.Half](rng, training, l.layout, sc), 1e-5)
						}
					})
				}
			}
		})
	}
}

// Two-pass gradients run each range of the second pass on the worker that
// summed it (pass.affine), and are right whether dx is a buffer of its own
// or written over dy: NHWC float32 training, and inference with rows of
// splitRowC channels or more in a tensor over maxTiledBytes (N=1, C=512,
// S=4200: 8.6 MB), which sweeps in two passes too.
func TestFusedGradAffinePasses(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 || runtime.NumCPU() < 2 {
		t.Skipf("one worker here (NumCPU %d, GOMAXPROCS %d): the passes do not split", runtime.NumCPU(), runtime.GOMAXPROCS(0))
	}
	rng := rand.New(rand.NewPCG(43, 44))
	for _, training := range []bool{true, false} {
		t.Run(fmt.Sprintf("training=%v", training), func(t *testing.T) {
			sc := shapeCase{"", 1, 512, 4200}
			in := newFusedInputs[float32](rng, training, kernels.ChannelsLast, sc)
			kernels.ResetSplitStats()
			checkFused(t, training, in, 1e-5)
			require.Equal(t, uint64(1), kernels.AffineSplits(), "the call's second pass was not affine")
			wantDx, wantScale, wantOffset := runFused(t, training, in)
			args := kernels.FusedGradArgs[float32]{
				Dims: in.dims, YBackprop: in.dy, X: in.x,
				Scale: in.scale, ReserveSpace1: in.mean, ReserveSpace2: in.variance, Epsilon: in.epsilon,
				ScaleBackprop: make([]float32, sc.C), OffsetBackprop: make([]float32, sc.C),
			}
			writeOver(&args.YBackprop, &args.XBackprop)
			kernels.ResetSplitStats()
			if training {
				kernels.TrainingGrad(args)
			} else {
				kernels.InferenceGrad(args)
			}
			require.Equal(t, uint64(1), kernels.AffineSplits(), "in place: the call's second pass was not affine")
			requireUnchanged(t, "x_backprop in place", args.XBackprop, wantDx)
			requireUnchanged(t, "scale_backprop", args.ScaleBackprop, wantScale)
			requireUnchanged(t, "offset_backprop", args.OffsetBackprop, wantOffset)
		})
	}
}

// TestFusedGradIndependentOfWorkers checks that the outputs are bit-equal
// whatever the number of goroutines: the partial sums of the ranges are added
// in range order, whichever goroutine formed them, and by channel units each
// channel's sums are one goroutine's.
func TestFusedGradIndependentOfWorkers(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	sc := shapeCase{"", 3, 64, 2011} // 386,112 elements: 5 times 2^16 (export_test.go), so 6 ranges (an even count)
	for _, l := range layouts {
		for _, form := range []struct {
			training, byChannel bool
		}{{true, true}, {true, false}, {false, false}} {
			training := form.training
			t.Run(fmt.Sprintf("%s/training=%v/byChannel=%v", l.name, training, form.byChannel), func(t *testing.T) {
				defer kernels.SetByChannel(kernels.SetByChannel(form.byChannel))
				in := newFusedInputs[float32](rng, training, l.layout, sc)
				var first [3][]float32
				for i, procs := range []int{1, 2, 3, 8} {
					prev := runtime.GOMAXPROCS(procs)
					kernels.ResetSplitStats()
					dx, scaleBp, offsetBp := runFused(t, training, in)
					runtime.GOMAXPROCS(prev)
					if !form.byChannel {
						// The ranges are cut alike whatever GOMAXPROCS; the
						// workers that take them differ.
						calls, ranges, workers := kernels.SplitStats()
						require.Positive(t, calls, "GOMAXPROCS=%d: the case ran on one range", procs)
						require.Equal(t, (sc.N*sc.C*sc.S>>16+1)&^1, ranges)
						require.Equal(t, min(runtime.NumCPU(), procs, ranges), workers, "GOMAXPROCS=%d", procs)
					}
					if i == 0 {
						first = [3][]float32{dx, scaleBp, offsetBp}
						continue
					}
					require.Equal(t, first, [3][]float32{dx, scaleBp, offsetBp}, "GOMAXPROCS=%d", procs)
				}
			})
		}
	}
}

// ---------------------------------------------------------------------------
// NaN and Inf propagation.

// channelOf returns the channel of flat index i.
func channelOf(d kernels.Dims, i int) int {
	if d.Layout == kernels.ChannelsLast {
		return i % int(d.C)
	}
	return i / int(d.S) % int(d.C)
}

func testFusedNaN[T kernels.Element](t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	sc := shapeCase{"", 3, 6, 10}
	const bad = 4 // the channel that gets the NaN or Inf
	for _, l := range layouts {
		for _, training := range []bool{true, false} {
			for _, poison := range []struct {
				name  string
				value float64
				inX   bool
			}{
				{"NaN in x", math.NaN(), true},
				{"Inf in x", math.Inf(1), true},
				{"NaN in y_backprop", math.NaN(), false},
			} {
				t.Run(fmt.Sprintf("%s/training=%v/%s", l.name, training, poison.name), func(t *testing.T) {
					in := newFusedInputs[T](rng, training, l.layout, sc)
					at := index(l.layout, sc.C, sc.S, 1, bad, 3)
					if poison.inX {
						in.x[at] = fromF64[T](poison.value)
					} else {
						in.dy[at] = fromF64[T](poison.value)
					}
					dx, scaleBp, offsetBp := runFused(t, training, in)

					// Other channels are untouched by the poison.
					want := in.reference(training)
					for c := range sc.C {
						if c == bad {
							continue
						}
						assert.Falsef(t, math.IsNaN(float64(scaleBp[c])), "scale_backprop[%d] is NaN", c)
						assert.InDeltaf(t, want.scaleBackprop[c], float64(scaleBp[c]), 1e-5*maxAbsFinite(want.scaleBackprop), "scale_backprop[%d]", c)
						assert.InDeltaf(t, want.offsetBackprop[c], float64(offsetBp[c]), 1e-5*maxAbsFinite(want.offsetBackprop), "offset_backprop[%d]", c)
					}
					var dxOther []T
					var wantOther []float64
					for i := range dx {
						if channelOf(in.dims, i) != bad {
							dxOther = append(dxOther, dx[i])
							wantOther = append(wantOther, want.xBackprop[i])
						}
					}
					assertActivation(t, "x_backprop of other channels", dxOther, wantOther, want.xBackpropMagnitude)

					// The poisoned channel.
					// NaN, or ±Inf for an infinite x in inference (Σ dy·(x−μ) = ±Inf).
					assert.Falsef(t, isFinite(float64(scaleBp[bad])), "scale_backprop[%d] = %v, want NaN or Inf", bad, scaleBp[bad])
					if poison.inX {
						assert.Falsef(t, math.IsNaN(float64(offsetBp[bad])), "offset_backprop[%d] = NaN: Σdy does not involve x", bad)
					} else {
						assert.Truef(t, math.IsNaN(float64(offsetBp[bad])), "offset_backprop[%d] = %v, want NaN", bad, offsetBp[bad])
					}
					for i, v := range dx {
						if channelOf(in.dims, i) != bad {
							continue
						}
						isNaN := math.IsNaN(toF64(v))
						switch {
						case training:
							// Every x_backprop of the channel involves the channel's sums:
							// NaN for a NaN; ±Inf (or NaN) for an infinite x.
							if poison.inX && math.IsInf(poison.value, 0) {
								assert.Falsef(t, isFinite(toF64(v)), "training x_backprop[%d] = %v, want ±Inf or NaN", i, toF64(v))
							} else {
								assert.Truef(t, isNaN, "training x_backprop[%d] = %v, want NaN", i, toF64(v))
							}
						case poison.inX:
							// Inference: x_backprop = dy·scale·c does not involve x.
							assert.Falsef(t, isNaN, "inference x_backprop[%d] = NaN, but x_backprop = dy·scale·c does not involve x", i)
						default:
							assert.Equalf(t, i == at, isNaN, "inference x_backprop[%d] = %v", i, toF64(v))
						}
					}
					if !training {
						// In inference every finite x_backprop, poisoned channel included,
						// follows dy·scale·c.
						var got []T
						var wantDx []float64
						for i := range dx {
							if !math.IsNaN(want.xBackprop[i]) {
								got = append(got, dx[i])
								wantDx = append(wantDx, want.xBackprop[i])
							}
						}
						assertActivation(t, "inference x_backprop", got, wantDx, 0)
					}
				})
			}
		}
	}
}

func TestFusedGradNaN(t *testing.T) {
	t.Run("float32", testFusedNaN[float32])
	t.Run("float64", testFusedNaN[float64])
	t.Run("Half", testFusedNaN[kernels.Half])
	t.Run("BFloat16", testFusedNaN[kernels.BFloat16])
}

// ---------------------------------------------------------------------------
// GlobalNormalizationGrad.

func testGlobalGrad[T kernels.Element](t *testing.T) {
	rng := rand.New(rand.NewPCG(99, uint64(len(typeName[T]()))))
	for _, sc := range shapeCases {
		for _, scaleAfter := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/scale_after_normalization=%v", sc.name, scaleAfter), func(t *testing.T) {
				if isParallel(sc) {
					t.Logf("N·C·S = %d with GOMAXPROCS = %d", sc.N*sc.C*sc.S, runtime.GOMAXPROCS(0))
				}
				n, C := sc.N*sc.C*sc.S, sc.C
				in := newGlobalInputs[T](rng, sc)
				out := runGlobal(t, in, scaleAfter)
				want := referenceGlobalGrad(sc.N, C, sc.S, widenAll(in.t), widenAll(in.backprop),
					widenAll(in.m), widenAll(in.v), widenAll(in.gamma), float64(in.epsilon), scaleAfter)
				require.Len(t, out.dx, n)
				assertActivation(t, "dx", out.dx, want.dx, 0)
				assertVector(t, "dm", out.dm, want.dm)
				assertVector(t, "dv", out.dv, want.dv)
				assertVector(t, "db", out.db, want.db)
				assertVector(t, "dg", out.dg, want.dg)
				if !scaleAfter {
					for c := range C {
						assert.Zerof(t, toF64(out.dg[c]), "dg[%d] without scale_after_normalization", c)
					}
				}
				if sc.N*sc.S == 0 {
					for c := range C {
						assert.Zerof(t, toF64(out.db[c]), "db[%d] of an empty batch", c)
						assert.Zerof(t, toF64(out.dg[c]), "dg[%d] of an empty batch", c)
					}
				}
			})
		}
	}
}

// assertVector compares a per-channel output in T: within 1e-12 (float64) or
// 1e-5 (float32) of max|want|, or one ulp of T for Half.
func assertVector[T kernels.Element](t *testing.T, name string, got []T, want []float64) {
	t.Helper()
	assertActivation(t, name, got, want, 0)
}

type globalInputs[T kernels.Element] struct {
	dims        kernels.Dims
	t, backprop []T
	m, v, gamma []T
	epsilon     float32
}

func newGlobalInputs[T kernels.Element](rng *rand.Rand, sc shapeCase) globalInputs[T] {
	n := sc.N * sc.C * sc.S
	in := globalInputs[T]{
		dims:     kernels.Dims{N: int64(sc.N), C: int64(sc.C), S: int64(sc.S), Layout: kernels.ChannelsLast},
		t:        randomActivation[T](rng, n, 1, 2),
		backprop: randomActivation[T](rng, n, 0, 1),
		m:        make([]T, sc.C),
		v:        make([]T, sc.C),
		gamma:    make([]T, sc.C),
		epsilon:  1e-3,
	}
	for c := range sc.C {
		in.m[c] = fromF64[T](2*rng.Float64() - 1)
		in.v[c] = fromF64[T](0.5 + 1.5*rng.Float64())
		in.gamma[c] = fromF64[T](4*rng.Float64() - 2)
	}
	return in
}

type globalOutputs[T kernels.Element] struct {
	dx, dm, dv, db, dg []T
}

func runGlobal[T kernels.Element](t *testing.T, in globalInputs[T], scaleAfter bool) globalOutputs[T] {
	t.Helper()
	n, C := len(in.t), len(in.m)
	dx := newGuarded[T](n)
	dm, dv, db, dg := newGuarded[T](C), newGuarded[T](C), newGuarded[T](C), newGuarded[T](C)
	savedT, savedBackprop := append([]T(nil), in.t...), append([]T(nil), in.backprop...)
	savedM, savedV, savedGamma := append([]T(nil), in.m...), append([]T(nil), in.v...), append([]T(nil), in.gamma...)
	kernels.GlobalNormalizationGrad(kernels.GlobalNormalizationArgs[T]{
		Dims:                    in.dims,
		T:                       in.t,
		Backprop:                in.backprop,
		M:                       in.m,
		V:                       in.v,
		Gamma:                   in.gamma,
		VarianceEpsilon:         in.epsilon,
		ScaleAfterNormalization: scaleAfter,
		DX:                      dx.inner,
		DM:                      dm.inner,
		DV:                      dv.inner,
		DB:                      db.inner,
		DG:                      dg.inner,
	})
	dx.check(t, "dx")
	dm.check(t, "dm")
	dv.check(t, "dv")
	db.check(t, "db")
	dg.check(t, "dg")
	requireUnchanged(t, "t", in.t, savedT)
	requireUnchanged(t, "backprop", in.backprop, savedBackprop)
	requireUnchanged(t, "m", in.m, savedM)
	requireUnchanged(t, "v", in.v, savedV)
	requireUnchanged(t, "gamma", in.gamma, savedGamma)
	return globalOutputs[T]{dx.inner, dm.inner, dv.inner, db.inner, dg.inner}
}

func TestGlobalNormalizationGrad(t *testing.T) {
	t.Run("float32", testGlobalGrad[float32])
	t.Run("float64", testGlobalGrad[float64])
	t.Run("Half", testGlobalGrad[kernels.Half])
}

func TestGlobalNormalizationGradNaN(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	sc := shapeCase{"", 2, 5, 8}
	const bad = 2
	for _, scaleAfter := range []bool{true, false} {
		t.Run(fmt.Sprintf("scale_after_normalization=%v", scaleAfter), func(t *testing.T) {
			in := newGlobalInputs[float32](rng, sc)
			in.t[index(kernels.ChannelsLast, sc.C, sc.S, 1, bad, 5)] = float32(math.NaN())
			out := runGlobal(t, in, scaleAfter)
			want := referenceGlobalGrad(sc.N, sc.C, sc.S, widenAll(in.t), widenAll(in.backprop),
				widenAll(in.m), widenAll(in.v), widenAll(in.gamma), float64(in.epsilon), scaleAfter)
			assert.Truef(t, math.IsNaN(float64(out.dv[bad])), "dv[%d] = %v, want NaN", bad, out.dv[bad])
			assert.Equalf(t, scaleAfter, math.IsNaN(float64(out.dg[bad])), "dg[%d] = %v", bad, out.dg[bad])
			// dx = dy·s·γ', dm and db do not involve t.
			assertActivation(t, "dx", out.dx, want.dx, 0)
			assertVector(t, "dm", out.dm, want.dm)
			assertVector(t, "db", out.db, want.db)
			assertVector(t, "dv", out.dv, want.dv)
			assertVector(t, "dg", out.dg, want.dg)
		})
	}
}

// ---------------------------------------------------------------------------
// Panics.

func TestFusedGradPanics(t *testing.T) {
	const N, C, S = 2, 3, 4
	n := N * C * S
	valid := func() kernels.FusedGradArgs[float32] {
		return kernels.FusedGradArgs[float32]{
			Dims:           kernels.Dims{N: N, C: C, S: S, Layout: kernels.ChannelsLast},
			YBackprop:      make([]float32, n),
			X:              make([]float32, n),
			Scale:          make([]float32, C),
			ReserveSpace1:  make([]float32, C),
			ReserveSpace2:  make([]float32, C),
			Epsilon:        1e-3,
			XBackprop:      make([]float32, n),
			ScaleBackprop:  make([]float32, C),
			OffsetBackprop: make([]float32, C),
		}
	}
	for _, tc := range []struct {
		name   string
		mutate func(*kernels.FusedGradArgs[float32])
	}{
		{"y_backprop short", func(g *kernels.FusedGradArgs[float32]) { g.YBackprop = g.YBackprop[:n-1] }},
		{"x long", func(g *kernels.FusedGradArgs[float32]) { g.X = make([]float32, n+1) }},
		{"x_backprop short", func(g *kernels.FusedGradArgs[float32]) { g.XBackprop = g.XBackprop[:n-1] }},
		{"x_backprop nil", func(g *kernels.FusedGradArgs[float32]) { g.XBackprop = nil }},
		{"scale short", func(g *kernels.FusedGradArgs[float32]) { g.Scale = g.Scale[:C-1] }},
		{"reserve_space_1 long", func(g *kernels.FusedGradArgs[float32]) { g.ReserveSpace1 = make([]float32, C+1) }},
		{"reserve_space_2 short", func(g *kernels.FusedGradArgs[float32]) { g.ReserveSpace2 = nil }},
		{"scale_backprop short", func(g *kernels.FusedGradArgs[float32]) { g.ScaleBackprop = g.ScaleBackprop[:C-1] }},
		{"offset_backprop long", func(g *kernels.FusedGradArgs[float32]) { g.OffsetBackprop = make([]float32, C+1) }},
		{"dims larger than slices", func(g *kernels.FusedGradArgs[float32]) { g.Dims.N++ }},
		{"more channels than vectors", func(g *kernels.FusedGradArgs[float32]) { g.Dims.C, g.Dims.S = 4, 3 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok := valid()
			assert.NotPanics(t, func() { kernels.TrainingGrad(ok) })
			assert.NotPanics(t, func() { kernels.InferenceGrad(ok) })
			g := valid()
			tc.mutate(&g)
			assert.Panics(t, func() { kernels.TrainingGrad(g) }, "TrainingGrad")
			assert.Panics(t, func() { kernels.InferenceGrad(g) }, "InferenceGrad")
		})
	}
}

func TestGlobalNormalizationGradPanics(t *testing.T) {
	const N, C, S = 2, 3, 4
	n := N * C * S
	valid := func() kernels.GlobalNormalizationArgs[float32] {
		return kernels.GlobalNormalizationArgs[float32]{
			Dims:     kernels.Dims{N: N, C: C, S: S, Layout: kernels.ChannelsLast},
			T:        make([]float32, n),
			Backprop: make([]float32, n),
			M:        make([]float32, C),
			V:        make([]float32, C),
			Gamma:    make([]float32, C),
			DX:       make([]float32, n),
			DM:       make([]float32, C),
			DV:       make([]float32, C),
			DB:       make([]float32, C),
			DG:       make([]float32, C),
		}
	}
	type args = kernels.GlobalNormalizationArgs[float32]
	for _, tc := range []struct {
		name   string
		mutate func(*args)
	}{
		{"channels first", func(g *args) { g.Dims.Layout = kernels.ChannelsFirst }},
		{"t short", func(g *args) { g.T = g.T[:n-1] }},
		{"backprop long", func(g *args) { g.Backprop = make([]float32, n+1) }},
		{"dx short", func(g *args) { g.DX = nil }},
		{"m short", func(g *args) { g.M = g.M[:C-1] }},
		{"v long", func(g *args) { g.V = make([]float32, C+1) }},
		{"gamma short", func(g *args) { g.Gamma = nil }},
		{"dm short", func(g *args) { g.DM = g.DM[:C-1] }},
		{"dv long", func(g *args) { g.DV = make([]float32, C+1) }},
		{"db short", func(g *args) { g.DB = g.DB[:0] }},
		{"dg short", func(g *args) { g.DG = g.DG[:C-1] }},
		{"dims larger than slices", func(g *args) { g.Dims.S++ }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok := valid()
			assert.NotPanics(t, func() { kernels.GlobalNormalizationGrad(ok) })
			g := valid()
			tc.mutate(&g)
			assert.Panics(t, func() { kernels.GlobalNormalizationGrad(g) })
		})
	}
}

// TestWorkerPanicReachesCaller checks that a panic inside a worker goroutine
// is re-raised on the calling goroutine (where capi's recover sees it) rather
// than crashing the process. The only way to make a worker panic through the
// public API is a nonsensical Dims whose product is positive but whose
// factors are not: the length checks pass and the indexing fails inside the
// workers.
func TestWorkerPanicReachesCaller(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	dims := kernels.Dims{N: -2, C: 2, S: -70000, Layout: kernels.ChannelsFirst}
	n := dims.Len()
	require.Equal(t, 280000, n)
	g := kernels.FusedGradArgs[float32]{
		Dims:      dims,
		YBackprop: make([]float32, n), X: make([]float32, n), XBackprop: make([]float32, n),
		Scale: make([]float32, 2), ReserveSpace1: make([]float32, 2), ReserveSpace2: make([]float32, 2),
		ScaleBackprop: make([]float32, 2), OffsetBackprop: make([]float32, 2),
	}
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		kernels.TrainingGrad(g)
	}()
	require.NotNil(t, recovered, "the worker's panic was lost")
	msg := fmt.Sprint(recovered)
	assert.True(t, strings.Contains(msg, "worker panicked"), "panic value %q", msg)
}
