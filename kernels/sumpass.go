package kernels

// reduce returns the per-channel sums Σdy and Σdy·(x−mean) over the whole
// tensor as plan p (FormSums) cuts it.
func reduce[T Element](s *scratch, p Plan, dy, x []T, mean []float64) (sumDy, sumDyXc []float64) {
	return sweep[T](s, p, dy, x, nil, mean, nil, nil)
}

// sweep is reduce, and when t is not nil it also writes dx by t block by
// block in the same pass, while each block is in cache (FormSweep). Only a
// t that does not depend on the sums (inference) can be applied so; where
// the plan takes two passes instead (FormPasses: channels-last rows of
// splitRowC channels or more beyond maxTiledBytes, which is faster there
// although it reads dy twice), sweep runs them. BenchmarkInferenceGrad's
// channels-last cases chose both (docs/performance.md, "Block and range
// sizes"). m, where not nil, forms the gradient the passes read in dy's
// place (FusedBatchNormGradEx).
func sweep[T Element](s *scratch, p Plan, dy, x, dx []T, mean []float64, t *affine, m *gradMask[T]) (sumDy, sumDyXc []float64) {
	if p.Form == FormPasses {
		if p.Workers > 1 {
			return twoPasses(s, p, dy, x, dx, mean, *t, nil, m)
		}
		splits.serial(p.Chunks)
		sums := newSums(s, p, dy, x, mean)
		sums.job.mask = m
		pass{n: sums.n, ranges: p.Chunks, align: p.Align, fn: sums.run}.serially()
		sums.fold()
		apply := newApply(s, p, *t, dy, x, dx)
		apply.mask = m
		pass{n: sums.n, ranges: p.Chunks, align: p.Align, fn: apply.runRange, reverse: true}.serially()
		return sums.sumDy, sums.sumDyXc
	}
	sums := newSums(s, p, dy, x, mean)
	sums.job.mask = m
	if t != nil && sums.n > 0 {
		sums.job.dx, sums.job.apply = dx, t.repeated(s, p.L).withFloat32(s)
	}
	if p.Workers > 1 {
		shared := new(sumsPass[T]) // only a pass that helpers share is copied to the heap
		*shared = sums
		first := pass{n: shared.n, ranges: p.Chunks, align: p.Align, fn: shared.run}
		if p.Folds > 1 {
			parallelPasses(crewOf(p), first, shared.foldPass(p, nil))
		} else {
			parallelPasses(crewOf(p), first)
			shared.fold()
		}
		return shared.sumDy, shared.sumDyXc
	}
	if sums.n > 0 {
		splits.serial(p.Chunks)
		pass{n: sums.n, ranges: p.Chunks, align: p.Align, fn: sums.run}.serially()
	}
	sums.fold()
	return sums.sumDy, sums.sumDyXc
}

// sumsPass is the pass of sweep, or of a two-pass gradient's first pass:
// its job over the period dims and where each chunk's sums go.
type sumsPass[T Element] struct {
	job            sweepJob[T]
	n, L           int
	sumDy, sumDyXc []float64
	// parts holds each chunk's sums, 2·L a chunk, when they are folded
	// into sumDy and sumDyXc afterwards (partial).
	parts   []float64
	partial bool
}

// newSums prepares the sums of plan p's dy and x about mean (nothing to sum
// when the tensor is empty).
func newSums[T Element](s *scratch, p Plan, dy, x []T, mean []float64) sumsPass[T] {
	C := len(mean)
	sums := s.float64s(2 * C)
	q := sumsPass[T]{sumDy: sums[:C:C], sumDyXc: sums[C:], n: len(dy)}
	if q.n == 0 {
		return q
	}
	// Channels-last tensors run over the period L (a multiple of C) with
	// per-channel arrays repeated L/C times, and the sums are folded back
	// into C channels at the end.
	q.L = p.L
	q.job = sweepJob[T]{pd: p.Period, blk: p.SumsBlock, dy: dy, x: x, mean: s.repeat(mean, p.L)}
	// One chunk without a period sums straight into the result; otherwise
	// each chunk has its partial sums, folded in chunk order.
	q.partial = p.Chunks > 1 || p.L != C
	q.parts = sums
	if q.partial {
		q.parts = s.float64sDirty(2 * p.L * p.Chunks) // each run zeroes its own
	}
	return q
}

// run sums chunk r, elements [lo, hi), into its partial sums, zeroed first
// (by the worker that sums the chunk: in its cache, beside the others).
func (p *sumsPass[T]) run(r, lo, hi int) {
	L := p.L
	q := p.parts[2*L*r : 2*L*(r+1) : 2*L*(r+1)]
	if p.partial {
		clear(q)
	}
	p.job.run(lo, hi, q[:L:L], q[L:])
}

// fold adds the chunks' partial sums into sumDy and sumDyXc on the calling
// goroutine.
func (p *sumsPass[T]) fold() { p.foldRange(0, len(p.sumDy)) }

// foldRange adds the chunks' partial sums of channels [c0, c1) into sumDy
// and sumDyXc: chunk after chunk in chunk order, and within a chunk a
// channels-last period's repeats of the channels in order. Each channel's
// sums so take one order whatever the ranges, and plan.Folds ranges may add
// theirs up side by side (foldPass).
func (p *sumsPass[T]) foldRange(c0, c1 int) {
	if !p.partial {
		return
	}
	L, C := p.L, len(p.sumDy)
	for r := 0; r < len(p.parts); r += 2 * L {
		for k := r; k < r+L; k += C { // L is a multiple of C (Dims.periodic)
			addInto(p.sumDy[c0:c1], p.parts[k+c0:k+c1])
			addInto(p.sumDyXc[c0:c1], p.parts[L+k+c0:L+k+c1])
		}
	}
}

// foldPass is the pass that adds up the chunks' partial sums in plan.Folds
// ranges of channels, and then calls form, where not nil, on each range's
// channels once their sums are whole.
func (p *sumsPass[T]) foldPass(plan Plan, form func(sumDy, sumDyXc []float64, c0, c1 int)) pass {
	return pass{n: len(p.sumDy), ranges: plan.Folds, align: foldAlign, fn: func(r, c0, c1 int) {
		if r == 1 {
			splits.folds.Add(1)
		}
		p.foldRange(c0, c1)
		if form != nil {
			form(p.sumDy, p.sumDyXc, c0, c1)
		}
	}}
}

// sweepJob is sweep's pass over the period dims pd, in blocks of blk: the
// sums, and dx by apply when dx is not nil; of the gradient mask forms
// from dy where it is not nil.
type sweepJob[T Element] struct {
	pd        Dims
	blk       int
	dy, x, dx []T
	mean      []float64
	apply     affine
	mask      *gradMask[T]
}

// run adds the sums of the elements at [lo, hi) into a and b, and writes
// their dx.
func (j *sweepJob[T]) run(lo, hi int, a, b []float64) {
	if j.mask != nil {
		j.mask.sweep(j, lo, hi, a, b)
		return
	}
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
