package kernels

// applyAll writes dx = A[c]·(dy − MeanDy[c]) + B[c]·(x − Mean[c]) over the
// whole tensor, last range first: the sums pass before it read that range
// last, so it may still be in cache. (BenchmarkPasses times the pass; where
// L3 is shared, it runs level with walking the ranges in order.)
func applyAll[T Element](s *scratch, d Dims, t affine, dy, x, dx []T) {
	n := d.Len()
	if n == 0 {
		return
	}
	job := newApply(s, d, t, dy, x, dx)
	ranges := rangesFor[T](n)
	if ranges == 1 {
		job.run(0, n)
		return
	}
	shared := new(applyJob[T]) // only a job that helpers share is copied to the heap
	*shared = job
	pd, _ := d.periodic()
	parallel(n, ranges, blockFor(pd, blockLen), true, shared.runRange)
}

// newApply prepares applyAll's job.
func newApply[T Element](s *scratch, d Dims, t affine, dy, x, dx []T) applyJob[T] {
	pd, L := d.periodic()
	blk := blockFor(pd, blockLen)
	if pd.Layout == ChannelsLast && int(pd.C) > applyChunk && !t.ScaleOnly {
		blk = blockFor(pd, chunkRows*int(pd.C)) // rows enough for the chunks (applyRows)
	}
	job := applyJob[T]{pd: pd, blk: blk, dy: dy, x: x, dx: dx, t: t.repeated(s, L).withFloat32(s)}
	if !t.ScaleOnly && streams(pd, dy, x, dx) {
		job.t.f32.Stream = true // the scale-only loops have no streaming form
	}
	return job
}

// applyJob is applyAll's pass over the period dims pd, in blocks of blk.
type applyJob[T Element] struct {
	pd        Dims
	blk       int
	dy, x, dx []T
	t         affine
}

// runRange is run as parallel calls it.
func (j *applyJob[T]) runRange(_, lo, hi int) { j.run(lo, hi) }

// run writes dx for the elements at [lo, hi).
func (j *applyJob[T]) run(lo, hi int) {
	if L, ok := bfloat16Rows[T](j.pd, lo, hi); ok && j.t.f32 != nil {
		dy, x, dx := any(j.dy).([]BFloat16), any(j.x).([]BFloat16), any(j.dx).([]BFloat16)
		simdApplyBFloat16(L, j.t.f32, dy[lo:hi], x[lo:hi], dx[lo:hi])
		return
	}
	forBlocks(lo, hi, j.blk, j.dy, j.x, j.dx,
		func(off int, dy, x, dx []float32) { applyAffine(j.pd, off, j.t, dy, x, dx) },
		func(off int, dy, x, dx []float64) { applyAffine(j.pd, off, j.t, dy, x, dx) })
	if j.t.f32 != nil && j.t.f32.Stream {
		// Before parallel reports the range done. (Were the goroutine moved
		// to another thread mid-range, the switch's interrupt and locked
		// instructions would have flushed the stores made before it.)
		simdFence()
	}
}
