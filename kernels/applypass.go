package kernels

// applyAll writes dx = A[c]·(dy − MeanDy[c]) + B[c]·(x − Mean[c]) over the
// whole tensor as plan p cuts it, last chunk first: the sums pass before it
// read that chunk last, so it may still be in cache. (BenchmarkPasses times
// the pass; where L3 is shared, it runs level with walking the chunks in
// order.)
func applyAll[T Element](s *scratch, p Plan, t affine, dy, x, dx []T) {
	n := len(dy)
	if n == 0 {
		return
	}
	job := newApply(s, p, t, dy, x, dx)
	if p.Workers == 1 {
		splits.serial(p.Chunks)
		pass{n: n, ranges: p.Chunks, align: p.Align, reverse: true, fn: job.runRange}.serially()
		return
	}
	shared := new(applyJob[T]) // only a job that helpers share is copied to the heap
	*shared = job
	parallel(crewOf(p), n, p.Chunks, p.Align, true, shared.runRange)
}

// newApply prepares applyAll's job.
func newApply[T Element](s *scratch, p Plan, t affine, dy, x, dx []T) applyJob[T] {
	job := applyJob[T]{pd: p.Period, blk: p.ApplyBlock, dy: dy, x: x, dx: dx, t: t.repeated(s, p.L).withFloat32(s)}
	if job.t.f32 != nil && !t.ScaleOnly {
		job.t.f32.Stream = p.Stream // the scale-only loops have no streaming form
	}
	return job
}

// applyJob is applyAll's pass over the period dims pd, in blocks of blk;
// of the gradient mask forms from dy where it is not nil.
type applyJob[T Element] struct {
	pd        Dims
	blk       int
	dy, x, dx []T
	t         affine
	mask      *gradMask[T]
}

// runRange is run as parallel calls it.
func (j *applyJob[T]) runRange(_, lo, hi int) { j.run(lo, hi) }

// run writes dx for the elements at [lo, hi).
func (j *applyJob[T]) run(lo, hi int) {
	if L, ok := bfloat16Rows[T](j.pd, lo, hi); ok && j.t.f32 != nil && j.mask == nil {
		dy, x, dx := any(j.dy).([]BFloat16), any(j.x).([]BFloat16), any(j.dx).([]BFloat16)
		simdApplyBFloat16(L, j.t.f32, dy[lo:hi], x[lo:hi], dx[lo:hi])
		return
	}
	if j.mask != nil && j.t.f32 != nil {
		if L, ok := j.mask.bfloat16Rows(j.pd, lo, hi); ok {
			j.mask.applyBFloat16(j, L, lo, hi)
			return
		}
	}
	fn32 := func(off int, dy, x, dx []float32) { applyAffine(j.pd, off, j.t, dy, x, dx) }
	fn64 := func(off int, dy, x, dx []float64) { applyAffine(j.pd, off, j.t, dy, x, dx) }
	if j.mask != nil && j.t.f32 != nil && !j.t.ScaleOnly && j.mask.inRegisters(j.pd) {
		j.mask.applyInRegisters(j, lo, hi)
	} else if j.mask != nil {
		j.mask.blocks(lo, hi, j.blk, j.dy, j.x, j.dx, true, fn32, fn64)
	} else {
		forBlocks(lo, hi, j.blk, j.dy, j.x, j.dx, fn32, fn64)
	}
	if j.t.f32 != nil && j.t.f32.Stream {
		// Before parallel reports the range done. (Were the goroutine moved
		// to another thread mid-range, the switch's interrupt and locked
		// instructions would have flushed the stores made before it.)
		simdFence()
	}
}
