package kernels

import "sync"

// scratch is the per-channel working memory of one kernel call (means,
// sums, coefficients), carved from buffers that are pooled between calls:
// a small op in steady state then allocates nothing, so Go's collector and
// its background sweeper do not run because of gobn's calls and take CPU
// from TensorFlow's threads.
type scratch struct {
	f64 []float64
	f32 []float32
	u64 []uint64 // FusedBatchNormGradEx's mask bits
	a32 affine32 // the one float32 affine of a call (withFloat32)
	// masks holds FusedBatchNormGradEx's gradMask of the call
	// (maskOf.in).
	masks masks
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// getScratch returns an empty scratch; release gives it back.
func getScratch() *scratch { return scratchPool.Get().(*scratch) }

// release returns s to the pool: nothing carved from it may be used after.
// A call releases its scratch last, so release also stamps the call's end
// (callEnded).
func (s *scratch) release() {
	callEnded()
	s.f64, s.f32, s.u64, s.a32, s.masks = s.f64[:0], s.f32[:0], s.u64[:0], affine32{}, masks{}
	scratchPool.Put(s)
}

// float64s returns n zeroed float64s.
func (s *scratch) float64s(n int) []float64 { return carve(&s.f64, n) }

// float64sDirty returns n float64s that hold whatever they held: the caller
// writes each before it reads it.
func (s *scratch) float64sDirty(n int) []float64 { return carveDirty(&s.f64, n) }

// float32s returns n zeroed float32s.
func (s *scratch) float32s(n int) []float32 { return carve(&s.f32, n) }

// uint64sDirty returns n uint64s that hold whatever they held.
func (s *scratch) uint64sDirty(n int) []uint64 { return carveDirty(&s.u64, n) }

// carve returns the next n elements of *buf, zeroed. When the buffer is full
// a larger one replaces it; what was carved before keeps the old one.
func carve[F native | uint64](buf *[]F, n int) []F {
	out := carveDirty(buf, n)
	clear(out)
	return out
}

// carveDirty is carve without the zeroing.
func carveDirty[F native | uint64](buf *[]F, n int) []F {
	if len(*buf)+n > cap(*buf) {
		*buf = make([]F, 0, max(2*cap(*buf), n, 1024))
	}
	l := len(*buf)
	*buf = (*buf)[:l+n]
	return (*buf)[l : l+n : l+n]
}
