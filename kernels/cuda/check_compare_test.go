package cuda_test

// The GPU check's comparison (check_test.go): internal/reference's float64
// reference and comparison, over tensors held as bytes a block at a time.

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/gobn/gobn/internal/reference"
	"github.com/gobn/gobn/internal/tolerance"
	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/kernels/cuda"
)

// ---------------------------------------------------------------------------
// Comparison.

// stat is one side's comparison (reference.Stat), written to check.json
// with the largest float64 for a NaN or infinity, which JSON cannot hold.
type stat struct{ reference.Stat }

// finite returns v, or the largest float64 for a NaN or infinity.
func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return math.MaxFloat64
	}
	return v
}

func (s stat) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		MaxErr float64 `json:"maxerr"`
		Norm   float64 `json:"norm"`
		Bad    int     `json:"bad,omitempty"`
		NaN    int     `json:"nan,omitempty"`
	}{finite(s.MaxErr), finite(s.Norm), s.Bad, s.NaN})
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

// wanted returns the output want gives elements [lo, hi) of the tensors
// elements (reference.Channelwise.Elements).
func wanted(d kernels.Dims, elements []*tensor, images [][]byte, want func(c int, e []float64) float64, lo, hi int) []float64 {
	blocks := make([][]float32, len(images))
	for j, img := range images {
		blocks[j] = blockOf(elements[j].dt, img, lo, hi)
	}
	out := make([]float64, hi-lo)
	e := make([]float64, len(images))
	k := cursorAt(d, lo)
	for i := range out {
		for j := range blocks {
			e[j] = float64(blocks[j][i])
		}
		out[i] = want(k.c, e)
		k.next()
	}
	return out
}

// compareActivation compares two sides' activation outputs, of dt, with
// the reference's want, computed twice (for max|want|, then per element)
// rather than held: for the tensor over 2³¹ elements it would take 17 GB.
func compareActivation(d kernels.Dims, elements []*tensor, want func(c int, e []float64) float64, dt cuda.DType,
	gpu, cpu []byte, b tolerance.Bound) outputResult {
	var r outputResult
	images := elementsOf(elements)
	for _, m := range parallel(d.Len(), func(lo, hi int) float64 {
		return reference.MaxAbs(wanted(d, elements, images, want, lo, hi))
	}) {
		r.MaxWant = max(r.MaxWant, m)
	}
	for _, p := range parallel(d.Len(), func(lo, hi int) outputResult {
		var p outputResult
		g, c := blockOf(dt, gpu, lo, hi), blockOf(dt, cpu, lo, hi)
		for i, want := range wanted(d, elements, images, want, lo, hi) {
			p.GPU.Add(float64(g[i]), want, r.MaxWant, b)
			p.CPU.Add(float64(c[i]), want, r.MaxWant, b)
			p.GPUvsCPU.Add(float64(g[i]), float64(c[i]), r.MaxWant, b)
		}
		return p
	}) {
		r.GPU.Merge(p.GPU.Stat)
		r.CPU.Merge(p.CPU.Stat)
		r.GPUvsCPU.Merge(p.GPUvsCPU.Stat)
	}
	return r
}

// compareVector compares two sides' per-channel outputs with want.
func compareVector(dt cuda.DType, want []float64, gpu, cpu []byte, b tolerance.Bound) outputResult {
	r := outputResult{MaxWant: reference.MaxAbs(want)}
	for i, w := range want {
		g, c := load(dt, gpu, i), load(dt, cpu, i)
		r.GPU.Add(g, w, r.MaxWant, b)
		r.CPU.Add(c, w, r.MaxWant, b)
		r.GPUvsCPU.Add(g, c, r.MaxWant, b)
	}
	return r
}
