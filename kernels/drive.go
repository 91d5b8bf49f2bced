package kernels

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// blockLen is the number of elements handled at a time: small enough that a
// block of dy, x and dx stays in L1 between the passes over it. A pass that
// sums and writes dx block by block (inference) takes blocks of half that,
// fusedBlockLen, to leave room in L1 for the float64 sums of a channels-last
// row: go test -bench 'InferenceGrad/float32' -cpu 1, two runs of each,
// ChannelsLast 8x28x28x512 1.76-1.86 -> 1.33-1.41 ms, 8x112x112x64
// 2.69-2.95 -> 2.23-2.25 ms, ChannelsFirst 8x512x28x28 1.08-1.22 ->
// 0.80-0.82 ms (rows of 512 channels and more now take two passes, see
// sweep). Channels-last blocks are whole rows of the period instead, as many
// as fit in the block length and at least one, unless a row exceeds
// maxBlockLen.
const (
	blockLen      = 2048
	fusedBlockLen = 1024
	maxBlockLen   = 16384
	splitRowC     = 512 // channels-last rows this wide sweep in two passes
)

// blockFor returns the length of the blocks of at most limit elements (or
// one row) for the period dims pd.
func blockFor(pd Dims, limit int) int {
	L := int(pd.C)
	if pd.Layout != ChannelsLast || L == 0 || L > maxBlockLen {
		return limit
	}
	return max(1, limit/L) * L
}

// A gradient's elements are cut into ranges, each a multiple of the block
// length, with their own partial sums; the calling goroutine and up to one
// helper goroutine per further core claim the ranges one by one, and the
// partial sums are added up in range order. The number of ranges depends on
// the element count alone, so the result does not depend on how many
// goroutines ran, nor on which one took which range; and a helper that a busy
// machine starts late (TensorFlow's own threads spin for a while after each
// of its ops) leaves its share to the calling thread instead of holding it up.

// minElementsPerWorker is the least number of float32 elements per range
// (default 2^19; half as many Half or BFloat16 ones, whose conversions make
// them compute-bound); a gradient below twice this runs on the calling
// thread alone. Measured inside TensorFlow on 2 cores (make bench): on the
// "Parallel threshold" table a helper was noise-level to a quarter slower at
// 2^19 and 2^20 float32 elements, and up to 2x faster from 2^21; moving the
// split from 2^20 to 2^21 made the suite's 1.6M-element float32, half and
// bfloat16 cases 1.1-1.6x slower. One core nearly saturates the memory bus,
// and TensorFlow's idle threads spin on the other for a while after each op.
var minElementsPerWorker atomic.Int64

// maxRanges bounds the ranges of one pass.
const maxRanges = 16

func init() { minElementsPerWorker.Store(1 << 19) }

// SetMinElementsPerWorker sets the least number of elements per range and
// returns the previous value. It is for tests and tuning; the kernels read it
// on every call.
func SetMinElementsPerWorker(n int) int {
	return int(minElementsPerWorker.Swap(int64(max(1, n))))
}

// rangesFor returns how many ranges to cut n elements of T into.
func rangesFor[T Element](n int) int {
	return max(1, min(maxRanges, n/perRange[T]()))
}

// perRange returns the least number of elements of T per range.
func perRange[T Element]() int {
	per := int(minElementsPerWorker.Load())
	switch any(*new(T)).(type) {
	case Half, BFloat16:
		per = max(1, per/2)
	}
	return per
}

// workersFor returns how many goroutines may work on ranges ranges: one per
// core the process may use, at most GOMAXPROCS (which the host library may
// set above the core count, see capi).
func workersFor(ranges int) int {
	return max(1, min(runtime.NumCPU(), runtime.GOMAXPROCS(0), ranges))
}

// parallel calls fn(r, lo, hi) for each of ranges contiguous ranges that
// cover [0, n), each but the last a multiple of align long: the calling
// goroutine and helper goroutines claim them in order, or last range first
// when reverse is set. It returns once every claimed range is done; a helper
// that starts after the last range was claimed finds nothing and ends on its
// own, touching nothing but the claim's bookkeeping. A panic in a helper is
// re-raised on the calling goroutine, so the caller's recover sees it.
func parallel(n, ranges, align int, reverse bool, fn func(r, lo, hi int)) {
	parallelPasses(pass{n, ranges, align, reverse, fn}, nil, pass{})
}

// pass is one of parallelPasses' passes, as parallel's arguments.
type pass struct {
	n, ranges, align int
	reverse          bool
	fn               func(r, lo, hi int)
}

// parallelPasses is parallel over first, then between on the calling
// goroutine once every range of first is done, then parallel over second
// (when it has ranges), with the same helper goroutines for both passes: a
// helper out of first's ranges waits for between to finish and goes on to
// second's, where starting helpers afresh would make the second pass wait
// again for a thread to take them up (see the go statement below). Float32
// NHWC training gradients inside TensorFlow, lone calls alternating with
// helpers started for each pass, 41, 81 and 101 pairs: 8x56x56x64 1.14,
// 1.08 and 1.08x faster, 8x14x14x1024 1.06, 1.08, 1.06x, 8x28x28x512 1.04,
// 1.02, 1.05x, 8x56x56x256 0.99 and 1.05x, 8x112x112x64 1.01 and 0.99x;
// one-range controls 0.98-1.06x.
func parallelPasses(first pass, between func(), second pass) {
	ranges := max(first.ranges, second.ranges)
	if ranges <= 1 {
		first.fn(0, 0, first.n)
		if between != nil {
			between()
		}
		if second.ranges > 0 {
			second.fn(0, 0, second.n)
		}
		return
	}
	helpers := workersFor(ranges) - 1
	c1 := newClaims(first, helpers)
	var c2 *claims
	var g *gate // only a second pass has helpers wait
	if second.ranges > 0 {
		c2, g = newClaims(second, helpers), &gate{open: make(chan struct{})}
		// Whatever stops the caller before the second pass, its helpers
		// find the gate open and no range to claim.
		defer g.release(c2)
	}
	for h := range helpers {
		go func() {
			c1.work(h)
			if c2 != nil {
				g.await()
				c2.work(h)
			}
		}()
	}
	if helpers > 0 {
		// Go puts the goroutine a go statement starts in its P's one-slot
		// "run next" place, and another thread that takes a goroutine from
		// there first sleeps 3 us (50 us or more once Linux's timer slack
		// stretches it), lest the P run it itself. An empty goroutine
		// started last takes that place and moves the helpers to the P's
		// queue, which other threads take from at once. Inside TensorFlow
		// on 2 cores, the median time from the go statement to a helper's
		// first range fell from ~155 to ~85 us (the least from 80-120 to
		// 26-54 us); calls alternating with and without it, 300 us apart
		// on a locked thread, made the median 8x56x56x64 training gradient
		// 3-10% faster in 5 runs of 6 (12% slower in the sixth).
		go func() {}()
	}
	// The calling goroutine works too: a thread that calls in from C holds
	// its goroutine locked, and parking it would leave the work to wait for
	// another thread.
	c1.work(helpers)
	c1.wait()
	c1.raise()
	if c2 == nil {
		return
	}
	if between != nil {
		between()
	}
	g.release(nil)
	c2.work(helpers)
	c2.wait()
	c2.raise()
}

// gate holds parallelPasses' helpers between the two passes.
type gate struct {
	opened atomic.Bool
	once   sync.Once
	open   chan struct{}
}

// await returns once the gate is open. It spins for up to waitSpin first:
// between is short, and a helper that parks must wait for a thread to run it
// again once woken.
func (g *gate) await() {
	for start := time.Now(); time.Since(start) < waitSpin; {
		if g.opened.Load() {
			return
		}
	}
	<-g.open
}

// release opens the gate, first leaving c no ranges to claim unless c is
// nil. Only its first call has an effect.
func (g *gate) release(c *claims) {
	g.once.Do(func() {
		if c != nil {
			c.next.Store(int64(c.ranges))
		}
		g.opened.Store(true)
		close(g.open)
	})
}

// claims is the bookkeeping of one parallel call: the ranges, the next one
// to claim, and how many claimed ranges are not done yet.
type claims struct {
	n, ranges, size int
	reverse         bool
	fn              func(r, lo, hi int)
	next            atomic.Int64
	pending         atomic.Int64 // claims in flight, counted before the claim is made
	waiting         atomic.Bool  // the caller is out of ranges and waits on done
	done            chan struct{}
	panics          []any // by worker, the caller's last
}

// newClaims returns the bookkeeping of pass p for the caller and helpers
// helper goroutines.
func newClaims(p pass, helpers int) *claims {
	return &claims{
		n: p.n, ranges: p.ranges, size: ((p.n+p.ranges-1)/p.ranges + p.align - 1) / p.align * p.align,
		reverse: p.reverse, fn: p.fn, panics: make([]any, helpers+1), done: make(chan struct{}, 1),
	}
}

// raise re-raises a worker's panic on the calling goroutine.
func (c *claims) raise() {
	for _, p := range c.panics {
		if p != nil {
			panic(fmt.Sprintf("kernels: worker panicked: %v", p))
		}
	}
}

// work runs ranges for worker w until none is left.
func (c *claims) work(w int) {
	for {
		r, ok := c.claim()
		if !ok {
			return
		}
		c.run(w, r)
	}
}

// claim returns the next range, or false when none is left. pending counts
// the claim before it is made: once the caller's own claim fails, every
// claim that succeeded is already in pending.
func (c *claims) claim() (int, bool) {
	c.pending.Add(1)
	r := int(c.next.Add(1) - 1)
	if r >= c.ranges {
		c.finish()
		return 0, false
	}
	return r, true
}

// run calls fn for claimed range r. A panic is recorded for worker w and
// leaves no more ranges to claim.
func (c *claims) run(w, r int) {
	defer c.finish()
	defer func() {
		if p := recover(); p != nil {
			c.panics[w] = p
			c.next.Store(int64(c.ranges))
		}
	}()
	if c.reverse {
		r = c.ranges - 1 - r
	}
	c.fn(r, min(r*c.size, c.n), min((r+1)*c.size, c.n))
}

// finish marks a claim done, and wakes the waiting caller with the last one.
func (c *claims) finish() {
	if c.pending.Add(-1) == 0 && c.waiting.Load() {
		select {
		case c.done <- struct{}{}:
		default:
		}
	}
}

// wait returns once no claim is in flight. It spins for up to waitSpin
// first: a caller that parks (its thread locked when called from C) hands
// its P to another thread, which wakes to run what is left queued there,
// and takes it back when woken. NHWC training gradients on a locked thread,
// calls 300 us apart alternating with and without the spin, 3 runs of 300
// each: medians 0.5-2% faster at 8x56x56x64, 2-5% at 8x28x28x512, 2-7% at
// 8x112x112x64, with no worse upper quartile. (Waiting for the helpers to
// exit instead, as parallel did before, also waited on helpers that started
// after the last claim; spinning through those worsened the upper quartile
// of the first shape by 15-25%.)
func (c *claims) wait() {
	for start := time.Now(); time.Since(start) < waitSpin; {
		if c.pending.Load() == 0 {
			return
		}
	}
	c.waiting.Store(true)
	if c.pending.Load() == 0 {
		return
	}
	<-c.done
}

// waitSpin bounds how long the caller spins for the helpers' last ranges.
const waitSpin = 200 * time.Microsecond

// blockBuffers are the float32 conversion buffers of one worker.
type blockBuffers struct {
	dy, x, dx [maxBlockLen]float32
}

var bufferPool = sync.Pool{New: func() any { return new(blockBuffers) }}

// forBlocks calls fn for the elements at [lo, hi) of dy and x (and dx, when
// not nil), blk elements at a time in memory order (walking blocks backwards
// made the hardware prefetcher give up: a training gradient of 6.4M elements
// took 1.4-1.7x as long), with native slices: float32 and float64 tensors
// directly, Half and BFloat16 ones converted to float32, with the block's dx
// rounded back after fn returns.
func forBlocks[T Element](lo, hi, blk int, dy, x, dx []T, fn32 func(off int, dy, x, dx []float32), fn64 func(off int, dy, x, dx []float64)) {
	blk = min(blk, maxBlockLen)
	blocks := func(each func(b, e int)) {
		for b := lo; b < hi; b += blk {
			each(b, min(b+blk, hi))
		}
	}
	switch dy := any(dy).(type) {
	case []float32:
		x := any(x).([]float32)
		dx, _ := any(dx).([]float32)
		blocks(func(b, e int) {
			var dxBlock []float32
			if dx != nil {
				dxBlock = dx[b:e]
			}
			fn32(b, dy[b:e], x[b:e], dxBlock)
		})
		return
	case []float64:
		x := any(x).([]float64)
		dx, _ := any(dx).([]float64)
		blocks(func(b, e int) {
			var dxBlock []float64
			if dx != nil {
				dxBlock = dx[b:e]
			}
			fn64(b, dy[b:e], x[b:e], dxBlock)
		})
		return
	}
	buf := bufferPool.Get().(*blockBuffers)
	defer bufferPool.Put(buf)
	blocks(func(b, e int) {
		n := e - b
		widen(buf.dy[:n], dy[b:e])
		widen(buf.x[:n], x[b:e])
		if dx == nil {
			fn32(b, buf.dy[:n], buf.x[:n], nil)
			return
		}
		fn32(b, buf.dy[:n], buf.x[:n], buf.dx[:n])
		narrow(dx[b:e], buf.dx[:n])
	})
}

// widen converts src to float32 into dst, which has src's length.
func widen[T Element](dst []float32, src []T) {
	switch src := any(src).(type) {
	case []Half:
		if simdWidenHalf != nil {
			simdWidenHalf(dst, src)
			return
		}
		for i, h := range src {
			dst[i] = halfTable[h]
		}
	case []BFloat16:
		if simdWidenBFloat16 != nil {
			simdWidenBFloat16(dst, src)
			return
		}
		for i, b := range src {
			dst[i] = b.Float32()
		}
	case []float32:
		copy(dst, src)
	case []float64:
		for i, v := range src {
			dst[i] = float32(v)
		}
	}
}

// narrow rounds src into dst, which has src's length.
func narrow[T Element](dst []T, src []float32) {
	switch dst := any(dst).(type) {
	case []Half:
		if simdNarrowHalf != nil {
			simdNarrowHalf(dst, src)
			return
		}
		for i, v := range src {
			dst[i] = HalfFromFloat32(v)
		}
	case []BFloat16:
		if simdNarrowBFloat16 != nil {
			simdNarrowBFloat16(dst, src)
			return
		}
		for i, v := range src {
			dst[i] = BFloat16FromFloat32(v)
		}
	case []float32:
		copy(dst, src)
	case []float64:
		for i, v := range src {
			dst[i] = float64(v)
		}
	}
}

// toFloat64 returns the per-channel values p as float64.
func toFloat64[T Element](s *scratch, p []T) []float64 {
	out := s.float64s(len(p))
	switch p := any(p).(type) {
	case []float32:
		for i, v := range p {
			out[i] = float64(v)
		}
	case []float64:
		copy(out, p)
	case []Half:
		for i, v := range p {
			out[i] = float64(v.Float32())
		}
	case []BFloat16:
		for i, v := range p {
			out[i] = float64(v.Float32())
		}
	}
	return out
}

// fromFloat64 rounds the per-channel values p into dst, which has p's length.
func fromFloat64[T Element](dst []T, p []float64) {
	switch dst := any(dst).(type) {
	case []float32:
		for i, v := range p {
			dst[i] = float32(v)
		}
	case []float64:
		copy(dst, p)
	case []Half:
		for i, v := range p {
			dst[i] = HalfFromFloat32(float32(v))
		}
	case []BFloat16:
		for i, v := range p {
			dst[i] = BFloat16FromFloat32(float32(v))
		}
	}
}

// reduce returns the per-channel sums Σdy and Σdy·(x−mean) over the whole
// tensor, split over workers that each own their accumulators.
func reduce[T Element](s *scratch, d Dims, dy, x []T, mean []float64) (sumDy, sumDyXc []float64) {
	return sweep(s, d, dy, x, nil, mean, nil)
}

// sweep is reduce, and when t is not nil it also writes dx by t block by
// block in the same pass, while each block is in L1. Only a t that does not
// depend on the sums (inference) can be applied so. Channels-last rows of
// splitRowC channels or more take two passes instead, reduce then applyAll,
// which measured faster although it reads dy twice (probably because their
// float64 sums and means, 24 bytes a channel, crowd L1 when dx streams
// through it too). Go-only, one core, min of 15 (fused / two passes): NHWC
// 8x14x14x1024 0.75 / 0.57 ms, 8x28x28x512 (more than L3) 1.28 / 1.10 ms;
// with 256 channels 0.37 / 0.40 ms, and fused stays.
func sweep[T Element](s *scratch, d Dims, dy, x, dx []T, mean []float64, t *affine) (sumDy, sumDyXc []float64) {
	if t != nil && d.Layout == ChannelsLast && d.C >= splitRowC {
		sumDy, sumDyXc = reduce(s, d, dy, x, mean)
		applyAll(s, d, *t, dy, x, dx)
		return sumDy, sumDyXc
	}
	p := newSums(s, d, dy, x, mean)
	if t != nil && p.ranges > 0 {
		p.job.blk = blockFor(p.job.pd, fusedBlockLen)
		p.job.dx, p.job.apply = dx, t.repeated(s, p.L).withFloat32(s)
	}
	if p.ranges == 1 {
		p.run(0, 0, p.n)
	} else if p.ranges > 1 {
		shared := new(sumsPass[T]) // only a pass that helpers share is copied to the heap
		*shared = p
		parallel(p.n, p.ranges, p.job.blk, false, shared.run)
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
	p.job = sweepJob[T]{pd: pd, blk: blockFor(pd, blockLen), dy: dy, x: x, mean: s.repeat(mean, L)}
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

// applyAll writes dx = A[c]·(dy − MeanDy[c]) + B[c]·(x − Mean[c]) over the
// whole tensor, last range first: the sums pass before it read that range
// last, so it may still be in cache. (On this project's 2-core VM, whose L3
// other tenants share, a 6.4M-element pass measured level with walking the
// ranges in order, ~39 GB/s either way, and the same after a cache flush.)
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
	parallel(n, ranges, job.blk, true, shared.runRange)
}

// newApply prepares applyAll's job.
func newApply[T Element](s *scratch, d Dims, t affine, dy, x, dx []T) applyJob[T] {
	pd, L := d.periodic()
	job := applyJob[T]{pd: pd, blk: blockFor(pd, blockLen), dy: dy, x: x, dx: dx, t: t.repeated(s, L).withFloat32(s)}
	if !t.ScaleOnly && streams(pd, dy, x, dx) {
		job.t.f32.Stream = true // the scale-only loops have no streaming form
	}
	return job
}

// trainingPasses is TrainingGrad's two passes over a tensor of more than
// one range: the sums, then x_backprop by the coefficients formed from
// them, with the same helper goroutines for both (parallelPasses). t has
// Mean set.
func trainingPasses[T Element](s *scratch, g FusedGradArgs[T], mean []float64, t affine) {
	d := g.Dims
	sums := new(sumsPass[T])
	*sums = newSums(s, d, g.YBackprop, g.X, mean)
	apply := new(applyJob[T])
	pd, _ := d.periodic()
	parallelPasses(
		pass{sums.n, sums.ranges, sums.job.blk, false, sums.run},
		func() {
			sums.fold()
			g.coefficients(t, sums.sumDy, sums.sumDyXc, 0, int(d.C))
			*apply = newApply(s, d, t, g.YBackprop, g.X, g.XBackprop)
		},
		// Last range first, as applyAll.
		pass{sums.n, sums.ranges, blockFor(pd, blockLen), true, apply.runRange})
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

// minStreamElements is the least number of elements of a float32 gradient
// whose x_backprop, when it has a buffer of its own, the training pass writes
// with non-temporal stores (applyAll). The default, 2^21 (8 MiB a tensor, 24
// for x, dy and dx), is set from go test -bench TrainingGradOutput -cpu 2 on
// this project's 2-core VM with 32 MiB of L3: 3.2M and 6.4M elements ran
// 1.17-1.28x faster streamed (3.3M, 1.05-1.11x), 2.1M level, while at 1.6M
// elements, where x_backprop still fits in cache for whatever reads it
// next, streaming was level or slower.
var minStreamElements atomic.Int64

func init() { minStreamElements.Store(1 << 21) }

// SetMinStreamElements sets minStreamElements and returns the previous
// value. It is for tests and tuning; the kernels read it on every call.
func SetMinStreamElements(n int) int {
	return int(minStreamElements.Swap(int64(max(1, n))))
}

// streams reports whether applyAll writes dx with non-temporal stores: with
// the vector loops (simdApply, and so the float32 coefficients), a float32
// tensor of at least minStreamElements whose dx is neither dy nor x
// (written in place, dx's lines are already in cache from the read), laid
// out so that every row (period pd) or run starts 32-byte aligned and the
// whole of dx streams: a line written partly by ordinary stores and partly
// by non-temporal ones costs more than either (NCHW 8x1024x14x14, runs of
// 196, measured 1.5x slower so).
func streams[T Element](pd Dims, dy, x, dx []T) bool {
	dx32, ok := any(dx).([]float32)
	if simdApply == nil || !ok || len(dx) < int(minStreamElements.Load()) || !aligned32(dx32) {
		return false
	}
	if pd.Layout == ChannelsLast && pd.C%8 != 0 || pd.Layout != ChannelsLast && pd.S%8 != 0 {
		return false
	}
	return &dx[0] != &dy[0] && &dx[0] != &x[0]
}
