package kernels

import "unsafe"

// reduce returns the per-channel sums Σdy and Σdy·(x−mean) over the whole
// tensor, split over workers that each own their accumulators.
func reduce[T Element](s *scratch, d Dims, dy, x []T, mean []float64) (sumDy, sumDyXc []float64) {
	return sweep(s, d, dy, x, nil, mean, nil)
}

// sweep is reduce, and when t is not nil it also writes dx by t block by
// block in the same pass, while each block is in cache. Only a t that does
// not depend on the sums (inference) can be applied so. Channels-last rows
// of splitRowC channels or more sweep in blocks of wideSweepBlockLen in a
// tensor whose sums tile (maxTiledBytes), and take two passes beyond (as
// training does, twoPasses), which is faster there although it reads dy
// twice.
// BenchmarkInferenceGrad's channels-last cases chose both;
// docs/performance.md has the figures.
func sweep[T Element](s *scratch, d Dims, dy, x, dx []T, mean []float64, t *affine) (sumDy, sumDyXc []float64) {
	bytes := d.Len() * int(unsafe.Sizeof(dy[0]))
	wide := t != nil && d.Layout == ChannelsLast && d.C >= splitRowC
	if wide && bytes > maxTiledBytes {
		if rangesFor[T](d.Len()) > 1 {
			return twoPasses(s, d, dy, x, dx, mean, *t, nil)
		}
		sumDy, sumDyXc = reduce(s, d, dy, x, mean)
		applyAll(s, d, *t, dy, x, dx)
		return sumDy, sumDyXc
	}
	p := newSums(s, d, dy, x, mean)
	// The ranges start on rows, whatever the blocks.
	align := blockFor(p.job.pd, blockLen)
	if t != nil && p.ranges > 0 {
		limit := tiledBlock(bytes, fusedBlockLen)
		if wide {
			limit = wideSweepBlockLen
		}
		p.job.blk = blockFor(p.job.pd, limit)
		p.job.dx, p.job.apply = dx, t.repeated(s, p.L).withFloat32(s)
	}
	if p.ranges == 1 {
		p.run(0, 0, p.n)
	} else if p.ranges > 1 {
		shared := new(sumsPass[T]) // only a pass that helpers share is copied to the heap
		*shared = p
		parallel(p.n, p.ranges, align, false, shared.run)
	}
	p.fold()
	return p.sumDy, p.sumDyXc
}

// sumsPass is the pass of sweep, or of TrainingGrad's first pass: its job
// over the period dims and where each range's sums go.
type sumsPass[T Element] struct {
	job            sweepJob[T]
	n, ranges, L   int
	sumDy, sumDyXc []float64
	// parts holds each range's sums, 2·L a range, when they are folded
	// into sumDy and sumDyXc afterwards (partial).
	parts   []float64
	partial bool
}

// newSums prepares the sums of d's dy and x about mean, in ranges (none
// when d is empty).
func newSums[T Element](s *scratch, d Dims, dy, x []T, mean []float64) sumsPass[T] {
	C := int(d.C)
	sums := s.float64s(2 * C)
	p := sumsPass[T]{sumDy: sums[:C:C], sumDyXc: sums[C:], n: d.Len()}
	if p.n == 0 {
		return p
	}
	// Channels-last tensors run over the period L (a multiple of C) with
	// per-channel arrays repeated L/C times, and the sums are folded back
	// into C channels at the end.
	pd, L := d.periodic()
	p.L = L
	p.job = sweepJob[T]{pd: pd, blk: blockFor(pd, tiledBlock(p.n*int(unsafe.Sizeof(dy[0])), blockLen)), dy: dy, x: x, mean: s.repeat(mean, L)}
	// One range without a period sums straight into the result; otherwise
	// each range has its partial sums, folded in range order.
	p.ranges = rangesFor[T](p.n)
	p.partial = p.ranges > 1 || L != C
	p.parts = sums
	if p.partial {
		p.parts = s.float64s(2 * L * p.ranges)
	}
	return p
}

// run sums range r, elements [lo, hi).
func (p *sumsPass[T]) run(r, lo, hi int) {
	L := p.L
	q := p.parts[2*L*r : 2*L*(r+1) : 2*L*(r+1)]
	p.job.run(lo, hi, q[:L:L], q[L:])
}

// fold adds the ranges' partial sums into sumDy and sumDyXc, in range
// order.
func (p *sumsPass[T]) fold() {
	if !p.partial {
		return
	}
	L := p.L
	for r := 0; r < len(p.parts); r += 2 * L {
		fold(p.sumDy, p.parts[r:r+L])
		fold(p.sumDyXc, p.parts[r+L:r+2*L])
	}
}

// sweepJob is sweep's pass over the period dims pd, in blocks of blk: the
// sums, and dx by apply when dx is not nil.
type sweepJob[T Element] struct {
	pd        Dims
	blk       int
	dy, x, dx []T
	mean      []float64
	apply     affine
}

// run adds the sums of the elements at [lo, hi) into a and b, and writes
// their dx.
func (j *sweepJob[T]) run(lo, hi int, a, b []float64) {
	if L, ok := bfloat16Rows[T](j.pd, lo, hi); ok && (j.dx == nil || j.apply.f32 != nil) {
		dy, x, dx := any(j.dy).([]BFloat16), any(j.x).([]BFloat16), any(j.dx).([]BFloat16)
		blk := max(L, j.blk/L*L)
		for o := lo; o < hi; o += blk {
			e := min(o+blk, hi)
			simdSumsBFloat16(L, dy[o:e], x[o:e], j.mean, a, b)
			if dx != nil {
				simdApplyBFloat16(L, j.apply.f32, dy[o:e], x[o:e], dx[o:e])
			}
		}
		return
	}
	forBlocks(lo, hi, j.blk, j.dy, j.x, j.dx,
		func(off int, dy, x, dx []float32) {
			channelSums(j.pd, off, dy, x, j.mean, a, b)
			if dx != nil {
				applyAffine(j.pd, off, j.apply, dy, x, dx)
			}
		},
		func(off int, dy, x, dx []float64) {
			channelSums(j.pd, off, dy, x, j.mean, a, b)
			if dx != nil {
				applyAffine(j.pd, off, j.apply, dy, x, dx)
			}
		})
}
