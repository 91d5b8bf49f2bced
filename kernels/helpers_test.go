package kernels_test

// Helpers of the kernels' tests: element conversions and guards, the
// comparisons by element type (the float64 reference and the comparison
// itself are internal/reference's), the shape cases, and the runners that
// call the kernels on them.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/internal/reference"
	"github.com/gobn/gobn/internal/tolerance"
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

func isFinite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

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
		reference.Close(t, name, widenAll(got), want, tolerance.Bound{Atol: 1e-12}, magnitude)
	case float32:
		reference.Close(t, name, widenAll(got), want, tolerance.Bound{Atol: 1e-5}, magnitude)
	default:
		assertWithinOneULP(t, name, got, want, magnitude)
	}
}

// shapeOf returns d as the reference sees it.
func shapeOf(d kernels.Dims) reference.Shape {
	return reference.Shape{N: int(d.N), C: int(d.C), S: int(d.S), ChannelsLast: d.Layout == kernels.ChannelsLast}
}

// index returns the flat index of element (n, c, s).
func index(layout kernels.Layout, C, S, n, c, s int) int {
	return reference.Shape{C: C, S: S, ChannelsLast: layout == kernels.ChannelsLast}.Index(n, c, s)
}

// channelOf returns the channel of flat index i.
func channelOf(d kernels.Dims, i int) int { return shapeOf(d).Channel(i) }

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

// want computes the float64 reference from the inputs as the kernel sees
// them (already rounded to T and float32).
func (in fusedInputs[T]) want(training bool) reference.Fused {
	return reference.FusedGrad(shapeOf(in.dims), widenAll(in.dy), widenAll(in.x),
		widenAll(in.scale), widenAll(in.mean), widenAll(in.variance), float64(in.epsilon), training)
}

// checkFused runs in through runFused and checks the outputs against the
// float64 reference: x_backprop within assertActivation's bounds, the 1-D
// outputs within rel. It returns the 1-D outputs.
func checkFused[T kernels.Element](t *testing.T, training bool, in fusedInputs[T], rel float64) (scaleBackprop, offsetBackprop []float32) {
	t.Helper()
	dx, scaleBp, offsetBp := runFused(t, training, in)
	want := in.want(training)
	assertActivation(t, "x_backprop", dx, want.XBackprop, want.XBackpropMagnitude)
	reference.Close(t, "scale_backprop", widenAll(scaleBp), want.ScaleBackprop, tolerance.Bound{Atol: rel}, 0)
	reference.Close(t, "offset_backprop", widenAll(offsetBp), want.OffsetBackprop, tolerance.Bound{Atol: rel}, 0)
	return scaleBp, offsetBp
}

// fusedGradTest returns testFusedGrad for one mode, as a test function.
func fusedGradTest[T kernels.Element](training bool) func(*testing.T) {
	return func(t *testing.T) { testFusedGrad[T](t, training) }
}

func testFusedGrad[T kernels.Element](t *testing.T, training bool) {
	rng := rand.New(rand.NewPCG(20240601, uint64(len(typeName[T]()))))
	eachShapeLayout(t, func(t *testing.T, sc shapeCase, layout kernels.Layout) {
		if isParallel(sc) {
			t.Logf("N·C·S = %d with GOMAXPROCS = %d", sc.N*sc.C*sc.S, runtime.GOMAXPROCS(0))
		}
		scaleBp, offsetBp := checkFused(t, training, newFusedInputs[T](rng, training, layout, sc), 1e-5)
		if sc.N*sc.S == 0 {
			for c := range sc.C {
				assert.Zero(t, scaleBp[c], "scale_backprop[%d] of an empty batch", c)
				assert.Zero(t, offsetBp[c], "offset_backprop[%d] of an empty batch", c)
			}
		}
	})
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

// want computes the float64 reference from the inputs as the kernel sees
// them.
func (in globalInputs[T]) want(scaleAfter bool) reference.Global {
	return reference.GlobalNormalizationGrad(shapeOf(in.dims), widenAll(in.t), widenAll(in.m), widenAll(in.v),
		widenAll(in.gamma), widenAll(in.backprop), float64(in.epsilon), scaleAfter)
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

// eachElement runs the forms of one generic test for the four element types
// as subtests named after the types.
func eachElement(t *testing.T, f32, f64, half, bf16 func(*testing.T)) {
	t.Run("float32", f32)
	t.Run("float64", f64)
	t.Run("Half", half)
	t.Run("BFloat16", bf16)
}

// eachShapeLayout runs test as a subtest for each shape case in each layout.
func eachShapeLayout(t *testing.T, test func(t *testing.T, sc shapeCase, layout kernels.Layout)) {
	for _, sc := range shapeCases {
		for _, l := range layouts {
			t.Run(fmt.Sprintf("%s/%s", sc.name, l.name), func(t *testing.T) { test(t, sc, l.layout) })
		}
	}
}
