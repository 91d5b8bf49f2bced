package kernels

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// A plan (plan.go) cuts a gradient's elements into chunks, each a multiple
// of the block length with its own partial sums, and says how many workers
// run them: the calling goroutine and helpers claim the chunks one by one,
// and the partial sums are added up in chunk order. The chunks depend on the
// shape alone, so the result does not depend on how many workers ran, nor on
// which one took which chunk; and a helper that a busy machine starts late
// (TensorFlow's own threads spin for a while after each of its ops, and run
// their own ops beside gobn's) leaves its share to the calling thread instead
// of holding it up. Here a pass's chunks are called ranges.

// SetMinElementsPerWorker sets the tuning's PerWorker and returns the
// previous value (tests and benchmarks).
func SetMinElementsPerWorker(n int) int {
	return setTuningField(func(t *Tuning) *int { return &t.PerWorker }, n)
}

// SetAffinePasses sets the tuning's Affine and returns the previous setting
// (tests and benchmarks).
func SetAffinePasses(on bool) bool {
	return setTuningField(func(t *Tuning) *bool { return &t.Affine }, on)
}

// splits counts the calls that cut their passes into ranges, and the most
// ranges and workers one of them used: SplitStats.
var splits splitCounter

type splitCounter struct {
	calls                 atomic.Uint64
	maxRanges, maxWorkers atomic.Int64
	affine                atomic.Uint64 // the calls with an affine pass after the first
	folds                 atomic.Uint64 // the calls that added up their chunks' sums in ranges (Plan.Folds)
	planeLanes            atomic.Uint64 // the by-channel units whose planes were summed in lanes (simdPlaneLanes)
	channelLanes          atomic.Uint64 // those of them summed channel by channel (simdChannelLanes)
	maskBits              atomic.Uint64 // the granules whose mask bits FusedBatchNormGradEx's first pass wrote (maskForm)
	// maskRegisters counts the pieces of FusedBatchNormGradEx's two passes
	// whose dz the vector loops formed (gradMask.inRegisters), and
	// maskStreamed those of the second pass's rows written with
	// non-temporal stores.
	maskRegisters, maskStreamed atomic.Uint64
	// maskBF16Rows counts the blocks of FusedBatchNormGradEx's bfloat16
	// rows whose dz was formed in bfloat16 for the bfloat16 row loops
	// (gradMask.bfloat16Rows).
	maskBF16Rows atomic.Uint64
	// maskPlanes counts the blocks of FusedBatchNormGradEx's by-channel
	// units whose dz the masked plane loops formed
	// (gradMask.planesInRegisters).
	maskPlanes atomic.Uint64
	// ranges and helperRanges count the ranges that calls with helpers
	// ran, and those of them that a helper ran; waitNanos the time their
	// callers waited, out of ranges, for the helpers' last: SplitShares.
	ranges, helperRanges, waitNanos atomic.Uint64
}

func (s *splitCounter) record(ranges, workers int) {
	s.calls.Add(1)
	atomicMax(&s.maxRanges, int64(ranges))
	atomicMax(&s.maxWorkers, int64(workers))
}

// serial records a call of ranges ranges on the calling goroutine alone.
func (s *splitCounter) serial(ranges int) {
	if ranges > 1 {
		s.record(ranges, 1)
	}
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
// passes into more than one range (chunks or by-channel units), on however
// many workers, and the most ranges and workers (the calling goroutine and
// its helpers) one call used.
// Tests read it to show that a case meant to exercise the parallel split did
// split, so a change of threshold cannot quietly empty them.
func SplitStats() (calls uint64, maxRanges, maxWorkers int) {
	return splits.calls.Load(), int(splits.maxRanges.Load()), int(splits.maxWorkers.Load())
}

// SplitShares reports, since the process started, how the calls that had
// helpers shared their work: the ranges they ran, those of them that a
// helper ran, and how long their callers waited, out of ranges, for the
// helpers' last. A helper woken too late for its call's work runs none, and
// one that claims a range last makes its caller wait: benchmarks read it
// beside their times (bench/manycore.py).
func SplitShares() (ranges, helperRanges uint64, wait time.Duration) {
	helped := splits.helperRanges.Load() // first: tally adds ranges first, so helped ≤ ranges here
	return splits.ranges.Load(), helped, time.Duration(splits.waitNanos.Load())
}

// crew is how a call's passes are shared: at most workers goroutines, the
// calling one included, while the helpers of all calls together stay within
// cores-1 (helpersOut); helper threads woken wake at a time (Tuning.Wake).
type crew struct {
	workers, cores, wake int
	burst                bool // the call came in a burst: the helpers poll after (Plan.Burst)
}

// crewOf returns p's crew.
func crewOf(p Plan) crew {
	return crew{workers: p.Workers, cores: p.Cores, wake: p.Wake, burst: p.Burst}
}

// helpersOut counts the helpers of every call in flight: a call takes only
// what the cores leave, so two gradients that TensorFlow runs side by side
// share the cores rather than start a helper per core each. A call's
// helpers count until it returns, not until each has ended: a helper woken
// late finds nothing to do and ends at once, and counting it on would take
// the next call of a chain its helper (on 2 cores, all of them).
var helpersOut atomic.Int64

// reserveHelpers takes up to want helpers of the limit all calls share, and
// returns how many it took, for the call to give back when it returns.
func reserveHelpers(want, limit int) int {
	for {
		out := helpersOut.Load()
		got := min(int64(want), int64(limit)-out)
		if got <= 0 {
			return 0
		}
		if helpersOut.CompareAndSwap(out, out+got) {
			return int(got)
		}
	}
}

// parallel calls fn(r, lo, hi) for each of ranges contiguous ranges that
// cover [0, n) in whole blocks of align elements (span), on crew c: the calling
// goroutine and helpers claim them in order, or last range first when
// reverse is set. It returns once every claimed range is done; a helper that
// starts after the last range was claimed finds nothing and ends on its own,
// touching nothing but the claim's bookkeeping. A panic in a helper is
// re-raised on the calling goroutine, so the caller's recover sees it.
func parallel(c crew, n, ranges, align int, reverse bool, fn func(r, lo, hi int)) {
	parallelPasses(c, pass{n: n, ranges: ranges, align: align, reverse: reverse, fn: fn})
}

// pass is one of parallelPasses' passes, as parallel's arguments, and for a
// pass after the first what runs before it and the order in which its
// workers claim the ranges.
type pass struct {
	n, ranges, align int
	reverse          bool
	fn               func(r, lo, hi int)
	// before, where not nil, runs on the calling goroutine once every range
	// of the passes before is done, and before any range of this one.
	before func()
	// affine, on a pass after the first of as many ranges as the first
	// (which must run in order), has each worker claim first the ranges it
	// ran in the first pass, last first, then any left, first first;
	// reverse is then ignored. (A worker is a goroutine: pinned helper
	// threads stay on their CPU, the caller's thread and helper goroutines
	// mostly do.) A range's data is still in the caches of the core that
	// read it, and dx written over dy there finds its lines in that core's
	// caches alone. Where a virtual machine's two CPUs sit on parts of the
	// processor with caches of their own (two CCDs of an AMD EPYC), a range
	// summed on one and written in place on the other moves its lines
	// between the caches (BenchmarkTrainingGradAffine times both ways).
	affine bool
}

// serially runs p's ranges on the calling goroutine in the order one worker
// would claim them: an affine pass's own ranges last first, as reverse.
func (p pass) serially() {
	for i := range p.ranges {
		r := i
		if p.reverse || p.affine {
			r = p.ranges - 1 - i
		}
		lo, hi := span(p.n, p.ranges, p.align, r)
		p.fn(r, lo, hi)
	}
}

// parallelPasses runs passes one after the other, each as parallel would,
// with the same helpers for all of them: a helper out of one pass's ranges
// waits at a gate for the next, which the calling goroutine opens once
// every range of the pass is done and the next one's before has run.
// Starting helpers afresh for each pass would make it wait again for a
// thread to take them up (see the go statement below); timing float32 NHWC
// training gradients inside TensorFlow against helpers started afresh for
// each pass chose it. The crew's workers are bounded here by GOMAXPROCS and
// by what other calls leave of the cores (reserveHelpers), and by the most
// ranges a pass has.
func parallelPasses(c crew, passes ...pass) {
	ranges := 0
	for _, p := range passes {
		ranges = max(ranges, p.ranges)
	}
	helpers := 0
	if want := min(c.workers, runtime.GOMAXPROCS(0), ranges) - 1; want > 0 {
		helpers = reserveHelpers(want, c.cores-1)
	}
	if ranges > 1 {
		splits.record(ranges, helpers+1)
	}
	if helpers == 0 {
		for _, p := range passes {
			if p.before != nil {
				p.before()
			}
			p.serially()
		}
		return
	}
	defer helpersOut.Add(int64(-helpers))
	if passes[0].before != nil {
		passes[0].before()
	}
	all := make([]*claims, len(passes))
	gates := make([]*gate, len(passes)) // the gate before each pass after the first
	for i, p := range passes {
		all[i] = newClaims(p, helpers)
		if i == 0 {
			if !p.reverse {
				all[i].homes, all[i].taken = helpers+1, make([]atomic.Bool, p.ranges)
			}
			continue
		}
		gates[i] = &gate{open: make(chan struct{})}
		first := passes[0]
		if p.affine && p.ranges == first.ranges && !first.reverse {
			if all[0].owner == nil {
				all[0].owner = make([]int32, first.ranges)
				splits.affine.Add(1)
			}
			all[i].after, all[i].taken = all[0], make([]atomic.Bool, p.ranges)
		}
		// Whatever stops the caller before this pass, its helpers find
		// the gate open and no range to claim.
		defer gates[i].release(all[i])
	}
	helper := func(h, block int) {
		for i, c := range all {
			if i > 0 {
				gates[i].await()
			}
			c.workFrom(h, block)
		}
	}
	// Pinned threads first where there are any (threads_linux.go), then
	// goroutines.
	h, callerSlot := onHelperThreads(helpers, c.wake, c.burst, func(h, slot int) { helper(h, home(h, slot, helpers+1)) })
	for i := h; i < helpers; i++ {
		go helper(i, home(i, -1, helpers+1))
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
	// With its helpers all pinned, the caller's block is that of the CPU
	// they left.
	if h < helpers {
		callerSlot = -1
	}
	block := home(helpers, callerSlot, helpers+1)
	for i, c := range all {
		if i > 0 {
			if passes[i].before != nil {
				passes[i].before()
			}
			gates[i].release(nil)
		}
		c.workFrom(helpers, block)
		c.wait()
		c.raise()
		c.tally()
	}
}

// gate holds parallelPasses' helpers before a pass.
type gate struct {
	opened atomic.Bool
	once   sync.Once
	open   chan struct{}
}

// await returns once the gate is open. It spins for up to waitSpin first:
// what the caller runs between two passes is short, and a helper that parks
// must wait for a thread to run it again once woken.
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
	n, ranges, align int
	reverse          bool
	fn               func(r, lo, hi int)
	next             atomic.Int64
	pending          atomic.Int64 // claims in flight, counted before the claim is made
	waiting          atomic.Bool  // the caller is out of ranges and waits on done
	done             chan struct{}
	panics           []any // by worker, the caller's last
	// owner, where not nil, records which worker ran each range (worker+1;
	// 0 for none), for an affine pass after this one.
	owner []int32
	// helped counts the ranges a helper ran (tally).
	helped atomic.Int64
	// after, on an affine pass, is the pass before, whose owner it follows;
	// taken marks the ranges claimed.
	after *claims
	taken []atomic.Bool
	// homes, where positive, has each worker run first a block of ranges of
	// its own (home), then any left, last first: a first pass's ranges,
	// given to the same CPUs call after call.
	homes int
}

// newClaims returns the bookkeeping of pass p for the caller and helpers
// helper goroutines.
func newClaims(p pass, helpers int) *claims {
	return &claims{
		n: p.n, ranges: p.ranges, align: p.align, reverse: p.reverse, fn: p.fn, panics: make([]any, helpers+1), done: make(chan struct{}, 1),
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

// workFrom runs ranges for worker w until none is left, those of home
// block b first where c has homes.
func (c *claims) workFrom(w, b int) {
	if c.after != nil {
		c.workAffine(w)
		return
	}
	if c.homes > 0 {
		c.workHome(w, b%c.homes)
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

// workHome runs, for worker w, the ranges of block b of c.homes (span's)
// still unclaimed, first first, then any range still unclaimed, last
// first: the end of the others' blocks, which they reach last.
func (c *claims) workHome(w, b int) {
	lo, hi := span(c.ranges, c.homes, 1, b)
	for r := lo; r < hi; r++ {
		c.take(w, r)
	}
	for r := c.ranges - 1; r >= 0; r-- {
		c.take(w, r)
	}
}

// home returns the block of ranges that worker w of a pass shared in
// blocks by as many workers runs first. Where the workers are one a
// pinned thread's CPU (blocks of them), it is the CPU's, slot, the
// thread's position among them (the caller's, whose helpers are all
// pinned, that of the CPU they leave: parallelPasses): a tensor that calls
// after calls share the same way (a chain of gradients, a benchmark's)
// stays in the caches of the cores that read it last, as an OpenMP loop's
// static schedule keeps it, whichever CPU the caller runs on. Elsewhere
// (slot -1: goroutines, which move between CPUs) it is w's.
func home(w, slot, blocks int) int {
	if slot >= 0 && pinnedThreads() == blocks {
		return slot
	}
	return w % blocks
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
	if c.owner != nil {
		c.owner[r] = int32(w + 1)
	}
	lo, hi := span(c.n, c.ranges, c.align, r)
	c.fn(r, lo, hi)
	if w < len(c.panics)-1 { // the caller is the last worker
		c.helped.Add(1)
	}
}

// tally adds a pass whose ranges are all done to SplitShares' counts, once,
// on the caller: the ranges, and those a helper ran.
func (c *claims) tally() {
	splits.ranges.Add(uint64(c.ranges))
	splits.helperRanges.Add(uint64(c.helped.Load()))
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
	if c.pending.Load() == 0 {
		return
	}
	start := time.Now()
	defer func() { splits.waitNanos.Add(uint64(time.Since(start))) }()
	for time.Since(start) < waitSpin {
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
