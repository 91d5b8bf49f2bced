package kernels_test

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gobn/gobn/internal/fuzzbytes"
	"github.com/gobn/gobn/internal/reference"
	"github.com/gobn/gobn/internal/tolerance"
	"github.com/gobn/gobn/kernels"
)

// The fuzz targets of the kernels. Each decodes a small problem from the
// fuzzer's bytes — element type, layout, mode, N, C, S, epsilon and every
// value, with NaN, ±Inf, −0, zero and negative variances and epsilons among
// them — runs the kernel with guarded outputs (runFused, runGlobal: no write
// outside an output, every output element written, inputs unchanged) and
// compares it with the naive float64 reference (internal/reference):
//
//   - channels whose inputs are all finite and whose variance+ε ≥ 1e-6 match
//     the reference within the tolerances of the unit tests;
//   - every channel's sums (offset_backprop, scale_backprop, db) and every
//     inference x_backprop (dy·scale·c, dx = dy·s·γ') match it NaN-aware: a
//     NaN where the reference has NaN, the same infinity where it has one;
//   - with R = N·S = 0 the fused 1-D outputs are zero, whatever the variance.
//
// One header bit in eight picks a shape over 2·65536 elements, so that the
// kernels split the work over goroutines. Once the fuzzer's bytes run out,
// the remaining values come from a PCG seeded with their hash.
//
// Run one with go test -run='^$' -fuzz='^FuzzFusedGrad$' ./kernels (and with
// GOEXPERIMENT=simd for the AVX2 loops the library ships); make test runs
// each briefly, make fuzz for longer. Seeds are in testdata/fuzz/<FuzzName>/.

// fuzzSource hands out the fuzzer's bytes, then pseudo-random ones.
type fuzzSource struct{ *fuzzbytes.Reader }

func newFuzzSource(data []byte) *fuzzSource {
	h := fnv.New64a()
	h.Write(data)
	rng := rand.New(rand.NewPCG(h.Sum64(), uint64(len(data))))
	s := &fuzzSource{fuzzbytes.New(data)}
	s.Rest = func() byte { return byte(rng.Uint32()) }
	return s
}

// value decodes an element: mostly a multiple of 1/16 in [−7.9, 7.9] (exact
// in every element type), sometimes scaled by 1/64 to 1024, sometimes NaN,
// ±Inf or −0.
func (s *fuzzSource) value() float64 {
	tag := s.Byte()
	switch {
	case tag >= 0xfc:
		return []float64{math.NaN(), math.Inf(1), math.Inf(-1), math.Copysign(0, -1)}[tag-0xfc]
	case tag >= 0xf0:
		scales := []float64{1.0 / 64, 1.0 / 4, 4, 64, 256, 1024}
		return scales[int(tag-0xf0)%len(scales)] * float64(int(s.Byte())-128) / 16
	}
	return float64(int(tag)-126) / 16
}

// variance decodes a variance: mostly in [0, 15], sometimes zero, negative,
// tiny or not finite.
func (s *fuzzSource) variance() float64 {
	tag := s.Byte()
	if tag >= 0xf8 {
		return []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0, -1, -1e-3, 1e-30, math.Copysign(0, -1)}[tag-0xf8]
	}
	return float64(tag) / 16
}

var fuzzEpsilons = []float32{1e-3, 1e-5, 0.1, 1e-3, 0, 1, -1e-3, float32(math.NaN()), float32(math.Inf(1)), 1e-30, -1, 0.5}

// shape decodes N, C and S: small, or (one header in eight) just over the
// size at which the kernels go parallel.
func (s *fuzzSource) shape(header byte) (N, C, S int) {
	if header&0x70 == 0x70 {
		C = 1 + int(s.Byte()%4)
		return 1 + int(s.Byte()%2), C, 2*65536/C + int(s.Byte())*37 + 1
	}
	return int(s.Byte() % 4), int(s.Byte() % 9), int(s.Byte() % 13)
}

func fuzzValues[T kernels.Element](s *fuzzSource, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = fromF64[T](s.value())
	}
	return out
}

func fuzzVector(s *fuzzSource, n int, draw func() float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(draw())
	}
	return out
}

// usable reports whether 1/sqrt(variance+epsilon) is finite and moderate.
func usable(variance, epsilon float64) bool {
	v := variance + epsilon
	return v >= 1e-6 && !math.IsInf(v, 0)
}

// channelFinite reports, per channel, whether every activation value of it is finite.
func channelFinite[T kernels.Element](d kernels.Dims, vals ...[]T) []bool {
	ok := make([]bool, d.C)
	for c := range ok {
		ok[c] = true
	}
	for _, v := range vals {
		for i, e := range v {
			if !isFinite(toF64(e)) {
				ok[channelOf(d, i)] = false
			}
		}
	}
	return ok
}

// perChannel splits an activation-shaped slice by channel.
func perChannel[E any](d kernels.Dims, v []E) [][]E {
	out := make([][]E, d.C)
	for i, e := range v {
		c := channelOf(d, i)
		out[c] = append(out[c], e)
	}
	return out
}

// sumsBound returns the bound on the error of a per-channel sum of T over d,
// relative to the sum of its terms' magnitudes. The vector loops may sum
// channels-last tiles of float32, Half or BFloat16 in float32, foldRows (16)
// rows at a time, each term also rounded in float32 once on the way (x−μ),
// before adding them into float64 (kernels/simd_amd64.go, foldRows), and
// so may a training gradient's channels-first planes by channel
// (simdPlaneLanes): (16 + 2)·2⁻²⁴ leaves a term to spare.
// Every other sum is formed in float64.
func sumsBound[T kernels.Element](d kernels.Dims, training bool) float64 {
	if _, wide := any(*new(T)).(float64); wide || !kernels.SIMD() {
		return 1e-12
	}
	if d.Layout == kernels.ChannelsLast || training && kernels.PlaneLanesInUse() && kernels.ByChannel[T](d) {
		return (16 + 2) / float64(1<<24)
	}
	return 1e-12
}

// assertSums compares float32 per-channel sums with the reference rounded to
// float32, NaN-aware; magnitude[c] is the sum of the absolute terms, bound
// the error allowed per unit of it (sumsBound).
func assertSums(t *testing.T, name string, got []float32, want, magnitude []float64, bound float64) {
	t.Helper()
	for c := range want {
		w := float64(float32(want[c]))
		g := float64(got[c])
		// |g − w| ≤ 1e-6·|w| + bound·magnitude[c], NaN-aware
		b := tolerance.Bound{Rtol: 1e-6, Atol: bound}
		var s reference.Stat
		if !s.Add(g, w, magnitude[c], b) {
			t.Fatalf("%s[%d] = %v, want %v (|diff| %.3g, bound %.3g)", name, c, g, w, math.Abs(g-w), b.At(magnitude[c], w))
		}
	}
}

func fuzzFused[T kernels.Element](t *testing.T, s *fuzzSource, header byte) {
	layout := kernels.Layout(header & 1)
	training := header&2 != 0
	N, C, S := s.shape(header)
	d := kernels.Dims{N: int64(N), C: int64(C), S: int64(S), Layout: layout}
	n := N * C * S
	in := fusedInputs[T]{
		dims:     d,
		epsilon:  fuzzEpsilons[int(s.Byte())%len(fuzzEpsilons)],
		scale:    fuzzVector(s, C, s.value),
		mean:     fuzzVector(s, C, s.value),
		variance: fuzzVector(s, C, s.variance),
		dy:       fuzzValues[T](s, n),
		x:        fuzzValues[T](s, n),
	}
	dx, scaleBackprop, offsetBackprop := runFused(t, training, in)
	if N*S == 0 {
		for c := range C {
			if scaleBackprop[c] != 0 || offsetBackprop[c] != 0 {
				t.Fatalf("R = 0: scale_backprop[%d] = %v, offset_backprop[%d] = %v, want 0", c, scaleBackprop[c], c, offsetBackprop[c])
			}
		}
		return
	}
	want := in.want(training)
	eps := float64(in.epsilon)

	// The sums, in every channel.
	dyAbs, dyXcAbs := make([]float64, C), make([]float64, C)
	for i := range n {
		c := channelOf(d, i)
		g := toF64(in.dy[i])
		dyAbs[c] += math.Abs(g)
		dyXcAbs[c] += math.Abs(g * (toF64(in.x[i]) - float64(in.mean[c])))
	}
	for c := range C {
		dyXcAbs[c] /= math.Sqrt(float64(in.variance[c]) + eps)
	}
	assertSums(t, "offset_backprop", offsetBackprop, want.OffsetBackprop, dyAbs, sumsBound[T](d, training))
	assertSums(t, "scale_backprop", scaleBackprop, want.ScaleBackprop, dyXcAbs, sumsBound[T](d, training))

	if !training {
		// x_backprop = dy·scale·c, channel by channel.
		got, wantDx := perChannel(d, dx), perChannel(d, want.XBackprop)
		for c := range C {
			assertActivation(t, "inference x_backprop", got[c], wantDx[c], 0)
		}
		return
	}

	// Training x_backprop in the channels where the math is well defined,
	// against a reference whose other channels are zeroed so that their
	// magnitude does not loosen the tolerance.
	finite := channelFinite(d, in.dy, in.x)
	normal := make([]bool, C)
	clean := fusedInputs[T]{dims: d, epsilon: in.epsilon,
		scale: make([]float32, C), mean: make([]float32, C), variance: make([]float32, C),
		dy: append([]T(nil), in.dy...), x: append([]T(nil), in.x...)}
	for c := range C {
		normal[c] = finite[c] && isFinite(float64(in.scale[c])) && isFinite(float64(in.mean[c])) &&
			!math.IsNaN(float64(in.variance[c])) && usable(float64(in.variance[c]), eps)
		clean.variance[c] = 1
		if normal[c] {
			clean.scale[c], clean.mean[c], clean.variance[c] = in.scale[c], in.mean[c], in.variance[c]
		}
	}
	if !usable(1, eps) {
		return // no channel is normal
	}
	for i := range n {
		if !normal[channelOf(d, i)] {
			clean.dy[i], clean.x[i] = fromF64[T](0), fromF64[T](0)
		}
	}
	ref := clean.want(true)
	var got []T
	var wantDx []float64
	for i := range n {
		if normal[channelOf(d, i)] {
			got = append(got, dx[i])
			wantDx = append(wantDx, ref.XBackprop[i])
		}
	}
	assertActivation(t, "training x_backprop", got, wantDx, ref.XBackpropMagnitude)
}

func fuzzSeedsKernels(f *testing.F) {
	f.Add([]byte{0x00, 0})                                                                   // float32, channels last, inference, PRNG values
	f.Add([]byte{0x03, 1})                                                                   // float32, channels first, training
	f.Add([]byte{0x02, 2, 3, 5, 7, 0})                                                       // half, training, N=3 C=5 S=7
	f.Add([]byte{0x03, 3, 2, 3, 4, 4})                                                       // bfloat16, training, epsilon 0
	f.Add([]byte{0x72, 0, 1, 0, 100, 0})                                                     // parallel
	f.Add([]byte{0x02, 0, 1, 1, 1, 0, 0x80, 0x90, 0xfc, 0x7e, 0x7e})                         // a NaN variance
	f.Add([]byte{0x02, 0, 0, 4, 5, 0})                                                       // N = 0
	f.Add([]byte{0x03, 1, 2, 0, 3, 7})                                                       // C = 0, NaN epsilon
	f.Add([]byte{0x02, 0, 2, 2, 3, 6, 0x90, 0x90, 0x80, 0x80, 0xf8, 0xfa, 0xfd, 0xfe, 0xff}) // negative epsilon, Inf values
}

// fuzzForms fuzzes the form of a test for one element type: the first byte
// is the header the form reads, the second picks the form.
func fuzzForms(f *testing.F, forms ...func(t *testing.T, s *fuzzSource, header byte)) {
	fuzzSeedsKernels(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		s := newFuzzSource(data)
		header := s.Byte()
		forms[int(s.Byte())%len(forms)](t, s, header)
	})
}

func FuzzFusedGrad(f *testing.F) {
	fuzzForms(f, fuzzFused[float32], fuzzFused[float64], fuzzFused[kernels.Half], fuzzFused[kernels.BFloat16])
}

func fuzzGlobal[T kernels.Element](t *testing.T, s *fuzzSource, header byte) {
	scaleAfter := header&2 != 0
	N, C, S := s.shape(header)
	d := kernels.Dims{N: int64(N), C: int64(C), S: int64(S), Layout: kernels.ChannelsLast}
	n := N * C * S
	in := globalInputs[T]{
		dims:    d,
		epsilon: fuzzEpsilons[int(s.Byte())%len(fuzzEpsilons)],
		m:       fuzzValues[T](s, C),
		gamma:   fuzzValues[T](s, C),
	}
	in.v = make([]T, C)
	for c := range in.v {
		in.v[c] = fromF64[T](s.variance())
	}
	in.t, in.backprop = fuzzValues[T](s, n), fuzzValues[T](s, n)
	out := runGlobal(t, in, scaleAfter)
	eps := float64(in.epsilon)
	want := in.want(scaleAfter)

	// db = Σdy and dx = dy·s·γ' in every channel.
	assertActivation(t, "db", out.db, want.DB, 0)
	got, wantDx := perChannel(d, out.dx), perChannel(d, want.DX)
	for c := range C {
		assertActivation(t, "dx", got[c], wantDx[c], 0)
	}
	// dm, dv and dg where the channel is well defined.
	finite := channelFinite(d, in.t, in.backprop)
	for c := range C {
		v := toF64(in.v[c])
		if !finite[c] || !isFinite(toF64(in.m[c])) || !isFinite(toF64(in.gamma[c])) || math.IsNaN(v) || !usable(v, eps) {
			continue
		}
		assertActivation(t, "dm", out.dm[c:c+1], want.DM[c:c+1], 0)
		assertActivation(t, "dv", out.dv[c:c+1], want.DV[c:c+1], 0)
		assertActivation(t, "dg", out.dg[c:c+1], want.DG[c:c+1], 0)
	}
}

func FuzzGlobalNormalizationGrad(f *testing.F) {
	fuzzForms(f, fuzzGlobal[float32], fuzzGlobal[float64], fuzzGlobal[kernels.Half])
}
