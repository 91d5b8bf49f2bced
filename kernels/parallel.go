package kernels

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// A gradient's elements are cut into ranges, each a multiple of the block
// length, with their own partial sums; the calling goroutine and up to one
// helper goroutine per further core claim the ranges one by one, and the
// partial sums are added up in range order. The number of ranges depends on
// the element count alone, so the result does not depend on how many
// goroutines ran, nor on which one took which range; and a helper that a busy
// machine starts late (TensorFlow's own threads spin for a while after each
// of its ops) leaves its share to the calling thread instead of holding it up.

// minElementsPerWorker is the least number of float32 elements per range
// (default 2^18; half as many Half or BFloat16 ones, whose conversions make
// them compute-bound); a gradient below twice this runs on the calling
// thread alone. A helper must wait for a thread, and TensorFlow's idle
// threads spin for a while after each op, so it pays only on gradients of a
// few hundred microseconds. Chains of NHWC training gradients in one
// tf.function (make bench's oneDNN table) chose it (docs/performance.md,
// "Block and range sizes").
var minElementsPerWorker atomic.Int64

// maxRanges bounds the ranges of one pass.
const maxRanges = 16

func init() { minElementsPerWorker.Store(1 << 18) }

// SetMinElementsPerWorker sets the least number of elements per range and
// returns the previous value. It is for tests and tuning; the kernels read it
// on every call.
func SetMinElementsPerWorker(n int) int {
	return int(minElementsPerWorker.Swap(int64(max(1, n))))
}

// affinePasses has two-pass gradients run each range of the second pass
// on the worker that ran it in the first (pass.affine; SetAffinePasses).
var affinePasses atomic.Bool

func init() { affinePasses.Store(true) }

// SetAffinePasses switches pass.affine for two-pass gradients on or off
// (off: the second pass's ranges go to whichever worker claims them, last
// first) and returns the previous setting. It is for tests and benchmarks;
// the kernels read it on every call.
func SetAffinePasses(on bool) bool { return affinePasses.Swap(on) }

// splits counts the calls that cut their passes into ranges, and the most
// ranges and workers one of them used: SplitStats.
var splits splitCounter

type splitCounter struct {
	calls                 atomic.Uint64
	maxRanges, maxWorkers atomic.Int64
	affine                atomic.Uint64 // the calls whose second pass was affine
}

func (s *splitCounter) record(ranges, workers int) {
	s.calls.Add(1)
	atomicMax(&s.maxRanges, int64(ranges))
	atomicMax(&s.maxWorkers, int64(workers))
}

func atomicMax(v *atomic.Int64, n int64) {
	for {
		old := v.Load()
		if n <= old || v.CompareAndSwap(old, n) {
			return
		}
	}
}

// SplitStats reports, since the process started, how many calls cut their
// passes into more than one range, and the most ranges and workers (the
// calling goroutine and its helpers) one call used. Tests read it to show
// that a case meant to exercise the parallel split did split, so a change
// of threshold cannot quietly empty them.
func SplitStats() (calls uint64, maxRanges, maxWorkers int) {
	return splits.calls.Load(), int(splits.maxRanges.Load()), int(splits.maxWorkers.Load())
}

// rangesFor returns how many ranges to cut n elements of T into: an even
// number from two on, so that two or four workers end together (three
// ranges on two cores leave one core idle a third of the time).
func rangesFor[T Element](n int) int {
	r := n / perRange[T]()
	if r >= 2 {
		r += r % 2
	}
	return max(1, min(maxRanges, r))
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
	parallelPasses(pass{n: n, ranges: ranges, align: align, reverse: reverse, fn: fn}, nil, pass{})
}

// pass is one of parallelPasses' passes, as parallel's arguments, and for
// a second pass the order in which its workers claim the ranges.
type pass struct {
	n, ranges, align int
	reverse          bool
	fn               func(r, lo, hi int)
	// affine, on a second pass of as many ranges as the first (which
	// must run in order), has each worker claim first the ranges it ran in
	// the first pass, last first, then any left, first first; reverse is
	// then ignored. (A worker is a goroutine: pinned helper threads stay on
	// their CPU, the caller's thread and helper goroutines mostly do.) A
	// range's data is still in the caches of the core that read it, and dx
	// written over dy there finds its lines in that core's caches alone.
	// Where a virtual machine's two CPUs sit on parts of the processor with
	// caches of their own (two CCDs of an AMD EPYC), a range summed on one
	// and written in place on the other moves its lines between the caches
	// (BenchmarkTrainingGradAffine times both ways; docs/performance.md has
	// the figures).
	affine bool
}

// parallelPasses is parallel over first, then between on the calling
// goroutine once every range of first is done, then parallel over second
// (when it has ranges), with the same helper goroutines for both passes: a
// helper out of first's ranges waits for between to finish and goes on to
// second's, where starting helpers afresh would make the second pass wait
// again for a thread to take them up (see the go statement below). Timing
// float32 NHWC training gradients inside TensorFlow against helpers started
// afresh for each pass chose it.
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
	splits.record(ranges, helpers+1)
	c1 := newClaims(first, helpers)
	var c2 *claims
	var g *gate // only a second pass has helpers wait
	if second.ranges > 0 {
		c2, g = newClaims(second, helpers), &gate{open: make(chan struct{})}
		if second.affine && second.ranges == first.ranges && first.ranges <= maxRanges && !first.reverse {
			c1.owners, c2.after = true, c1
			splits.affine.Add(1)
		}
		// Whatever stops the caller before the second pass, its helpers
		// find the gate open and no range to claim.
		defer g.release(c2)
	}
	helper := func(h int) {
		c1.work(h)
		if c2 != nil {
			g.await()
			c2.work(h)
		}
	}
	// Pinned threads first where there are any (threads_linux.go), then
	// goroutines.
	h := onHelperThreads(helpers, helper)
	for i := h; i < helpers; i++ {
		go helper(i)
	}
	if h < helpers {
		// Go puts the goroutine a go statement starts in its P's one-slot
		// "run next" place, and another thread that takes a goroutine from
		// there first sleeps 3 us (50 us or more once Linux's timer slack
		// stretches it), lest the P run it itself. An empty goroutine
		// started last takes that place and moves the helpers to the P's
		// queue, which other threads take from at once, so helpers start
		// sooner. Chosen by timing 8x56x56x64 training gradients inside
		// TensorFlow with and without it.
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
	// owners has run record which worker ran each range, in owner
	// (worker+1; 0 for none), for an affine pass after this one.
	owners bool
	owner  [maxRanges]int32
	// after, on an affine pass, is the pass before, whose owner it follows;
	// taken marks the ranges claimed.
	after *claims
	taken [maxRanges]atomic.Bool
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
	if c.after != nil {
		c.workAffine(w)
		return
	}
	for {
		r, ok := c.claim()
		if !ok {
			return
		}
		c.run(w, r)
	}
}

// workAffine runs, for worker w, the ranges it ran in the pass before
// still unclaimed, last first, then any range still unclaimed, first
// first: the others' ranges they would reach last, least likely still in
// their caches.
func (c *claims) workAffine(w int) {
	for r := c.ranges - 1; r >= 0; r-- {
		if c.after.owner[r] == int32(w+1) {
			c.take(w, r)
		}
	}
	for r := range c.ranges {
		c.take(w, r)
	}
}

// take runs range r for worker w unless another worker has claimed it or
// no range is left to claim (next at ranges: a panic, or a gate released
// before the pass). pending counts the claim before it is made, as in claim.
func (c *claims) take(w, r int) {
	if c.taken[r].Load() {
		return
	}
	c.pending.Add(1)
	if c.next.Load() >= int64(c.ranges) || !c.taken[r].CompareAndSwap(false, true) {
		c.finish()
		return
	}
	c.run(w, r)
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
	if c.reverse && c.after == nil {
		r = c.ranges - 1 - r
	}
	if c.owners {
		c.owner[r] = int32(w + 1)
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
// and takes it back when woken; timing NHWC training gradients with and
// without the spin chose it. It waits for claims, not for the helpers to
// exit, lest it wait on helpers that start after the last claim.
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
