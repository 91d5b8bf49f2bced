package cuda_test

// The GPU check's comparison (check_test.go): the float64 reference and the
// statistics of an output against it.

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/gobn/gobn/internal/tolerance"
	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/kernels/cuda"
)

// ---------------------------------------------------------------------------
// Comparison.

// stat compares one side's output with the want over a tolerance.
type stat struct {
	MaxErr float64 `json:"maxerr"`
	Norm   float64 `json:"norm"`
	Bad    int     `json:"bad,omitempty"`
	NaN    int     `json:"nan,omitempty"`
}

func (s *stat) add(got, want, M float64, b tolerance.Bound) {
	d := math.Abs(got - want)
	den := b.Atol*M + b.Rtol*math.Abs(want)
	if d <= den { // within the bound, and neither is NaN
		s.MaxErr = max(s.MaxErr, d)
		if d > s.Norm*den {
			s.Norm = d / den
		}
		return
	}
	s.Bad++
	if math.IsNaN(got) {
		s.NaN++
	}
	norm := math.Inf(1)
	if den > 0 && !math.IsNaN(d) {
		norm = d / den
	}
	if math.IsNaN(d) {
		d = math.Inf(1)
	}
	s.MaxErr, s.Norm = max(s.MaxErr, d), max(s.Norm, norm)
}

// finite returns v, or the largest float64 for a NaN or infinity, which
// JSON cannot hold.
func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return math.MaxFloat64
	}
	return v
}

func (s stat) MarshalJSON() ([]byte, error) {
	type plain stat
	s.MaxErr, s.Norm = finite(s.MaxErr), finite(s.Norm)
	return json.Marshal(plain(s))
}

func (s *stat) merge(o stat) {
	s.MaxErr, s.Norm, s.Bad, s.NaN = max(s.MaxErr, o.MaxErr), max(s.Norm, o.Norm), s.Bad+o.Bad, s.NaN+o.NaN
}

// outputResult is one output's comparison: the target ("gpu") and the CPU
// kernel against the reference, and against each other.
type outputResult struct {
	MaxWant  float64 `json:"max_want"`
	GPU      stat    `json:"gpu"`
	CPU      stat    `json:"cpu"`
	GPUvsCPU stat    `json:"gpu_vs_cpu"`
}

// verdict returns why an output fails, nothing when it passes.
func (o outputResult) verdict() []string {
	var why []string
	for _, s := range []struct {
		side string
		s    stat
	}{{"gpu", o.GPU}, {"cpu", o.CPU}, {"gpu_vs_cpu", o.GPUvsCPU}} {
		if s.s.Bad > 0 || s.s.NaN > 0 {
			why = append(why, fmt.Sprintf("%s: %d elements out of tolerance (%d NaN), norm %.3g", s.side, s.s.Bad, s.s.NaN, s.s.Norm))
		}
	}
	if o.GPU.Norm > worseFloor && o.GPU.Norm > worseFactor*o.CPU.Norm {
		why = append(why, fmt.Sprintf("gpu norm %.3g is worse than cpu norm %.3g", o.GPU.Norm, o.CPU.Norm))
	}
	return why
}

// reference is an op's float64 reference: per-channel outputs, and the
// activation output as want(i) = A·(dy − MDy) + B·(x − M) with the
// coefficients of element i's channel (MDy and B nil when absent).
type reference struct {
	vectors      map[string][]float64
	A, MDy, B, M []float64
}

// cursor walks the channels of consecutive elements.
type cursor struct {
	c, s, C, S int
	last       bool
}

// cursorAt returns the cursor at element i of d.
func cursorAt(d kernels.Dims, i int) cursor {
	C, S := int(d.C), int(d.S)
	if d.Layout == kernels.ChannelsLast {
		return cursor{c: i % C, C: C, last: true}
	}
	return cursor{c: i / S % C, s: i % S, C: C, S: S}
}

// next moves to the next element.
func (k *cursor) next() {
	if !k.last {
		if k.s++; k.s < k.S {
			return
		}
		k.s = 0
	}
	if k.c++; k.c == k.C {
		k.c = 0
	}
}

// widen writes the elements of src, of dt, to dst as float32 (exact).
func widen(dt cuda.DType, src []byte, dst []float32) []float32 {
	dst = dst[:len(src)/size(dt)]
	switch dt {
	case cuda.Float32:
		copy(dst, view[float32](src))
	case cuda.Float16:
		for i, h := range view[kernels.Half](src) {
			dst[i] = h.Float32()
		}
	default:
		for i, h := range view[kernels.BFloat16](src) {
			dst[i] = h.Float32()
		}
	}
	return dst
}

// blockOf returns elements [lo, hi) of b, of dt, widened into a scratch
// slice.
func blockOf(dt cuda.DType, b []byte, lo, hi int) []float32 {
	return widen(dt, b[lo*size(dt):hi*size(dt)], make([]float32, hi-lo))
}

// sums returns Σdy and Σdy·(x−mean) per channel, in float64.
func sums(d kernels.Dims, dt cuda.DType, dy, x []byte, mean []float64) (sdy, sdx []float64) {
	C := int(d.C)
	parts := parallel(d.Len(), func(lo, hi int) [2][]float64 {
		a, b := make([]float64, C), make([]float64, C)
		g, v := blockOf(dt, dy, lo, hi), blockOf(dt, x, lo, hi)
		k := cursorAt(d, lo)
		for i := range g {
			a[k.c] += float64(g[i])
			b[k.c] += float64(g[i]) * (float64(v[i]) - mean[k.c])
			k.next()
		}
		return [2][]float64{a, b}
	})
	sdy, sdx = make([]float64, C), make([]float64, C)
	for _, p := range parts {
		for c := range C {
			sdy[c] += p[0][c]
			sdx[c] += p[1][c]
		}
	}
	return sdy, sdx
}

// wants returns the reference's want of elements [lo, hi).
func (ref *reference) wants(d kernels.Dims, dt cuda.DType, dy, x []byte, lo, hi int) []float64 {
	g, v := blockOf(dt, dy, lo, hi), blockOf(dt, x, lo, hi)
	w := make([]float64, len(g))
	k := cursorAt(d, lo)
	for i := range w {
		c := k.c
		gc := float64(g[i])
		if ref.MDy != nil {
			gc -= ref.MDy[c]
		}
		w[i] = ref.A[c] * gc
		if ref.B != nil {
			w[i] += ref.B[c] * (float64(v[i]) - ref.M[c])
		}
		k.next()
	}
	return w
}

// compareActivation compares two sides' activation outputs with the
// reference's want, computed twice (for max|want|, then per element)
// rather than held: for the tensor over 2³¹ elements it would take 17 GB.
func compareActivation(d kernels.Dims, dt cuda.DType, ref *reference, dy, x, gpu, cpu []byte, b tolerance.Bound) outputResult {
	var r outputResult
	for _, m := range parallel(d.Len(), func(lo, hi int) float64 {
		m := 0.0
		for _, w := range ref.wants(d, dt, dy, x, lo, hi) {
			m = max(m, math.Abs(w))
		}
		return m
	}) {
		r.MaxWant = max(r.MaxWant, m)
	}
	for _, p := range parallel(d.Len(), func(lo, hi int) outputResult {
		var p outputResult
		g, c := blockOf(dt, gpu, lo, hi), blockOf(dt, cpu, lo, hi)
		for i, w := range ref.wants(d, dt, dy, x, lo, hi) {
			p.GPU.add(float64(g[i]), w, r.MaxWant, b)
			p.CPU.add(float64(c[i]), w, r.MaxWant, b)
			p.GPUvsCPU.add(float64(g[i]), float64(c[i]), r.MaxWant, b)
		}
		return p
	}) {
		r.GPU.merge(p.GPU)
		r.CPU.merge(p.CPU)
		r.GPUvsCPU.merge(p.GPUvsCPU)
	}
	return r
}

// compareVector compares two sides' per-channel outputs with want.
func compareVector(dt cuda.DType, want []float64, gpu, cpu []byte, b tolerance.Bound) outputResult {
	var r outputResult
	for _, w := range want {
		r.MaxWant = max(r.MaxWant, math.Abs(w))
	}
	for i, w := range want {
		g, c := load(dt, gpu, i), load(dt, cpu, i)
		r.GPU.add(g, w, r.MaxWant, b)
		r.CPU.add(c, w, r.MaxWant, b)
		r.GPUvsCPU.add(g, c, r.MaxWant, b)
	}
	return r
}
