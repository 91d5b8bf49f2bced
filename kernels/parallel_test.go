package kernels

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A helper that starts after the last range was claimed finds nothing to do,
// and the caller does not wait for it: parallel's caller returns once every
// claimed range is done.
func TestClaimsLateHelper(t *testing.T) {
	var calls [4]atomic.Int32
	c := &claims{n: 100, ranges: 4, align: 25, fn: func(r, lo, hi int) { calls[r].Add(1) },
		panics: make([]any, 2), done: make(chan struct{}, 1)}
	c.workFrom(1, 1) // the caller, alone
	c.wait()         // returns: nothing in flight
	c.workFrom(0, 0) // the helper, late
	for r := range calls {
		assert.Equal(t, int32(1), calls[r].Load(), "range %d", r)
	}
	assert.Equal(t, int64(0), c.pending.Load())
}

// The caller waits for a range a helper has claimed and not finished, in
// an affine pass too (the helper's own range 0, the caller's 1).
func TestClaimsWaitsForClaimedRange(t *testing.T) {
	for _, affine := range []bool{false, true} {
		t.Run(fmt.Sprintf("affine=%v", affine), func(t *testing.T) { testClaimsWaitsForClaimedRange(t, affine) })
	}
}

func testClaimsWaitsForClaimedRange(t *testing.T, affine bool) {
	release := make(chan struct{})
	started := make(chan struct{})
	var done atomic.Bool
	c := &claims{n: 2, ranges: 2, align: 1, panics: make([]any, 2), done: make(chan struct{}, 1)}
	if affine {
		c.after = &claims{ranges: 2, owner: []int32{1, 2}}
		c.taken = make([]atomic.Bool, 2)
	}
	c.fn = func(r, lo, hi int) {
		if r == 0 { // the helper's range
			close(started)
			<-release
			done.Store(true)
		}
	}
	go c.workFrom(0, 0)
	<-started
	returned := make(chan struct{})
	go func() {
		c.workFrom(1, 1)
		c.wait()
		assert.True(t, done.Load(), "wait returned before the helper's range was done")
		close(returned)
	}()
	time.Sleep(5 * time.Millisecond) // past the caller's spin: it blocks on done
	close(release)
	<-returned
}

// SplitShares counts the ranges a call with helpers ran, those a helper
// ran, and the time its caller waited for a helper's last range: here the
// helper's range holds on until the caller, out of ranges, has waited
// through its spin.
func TestSplitShares(t *testing.T) {
	ranges, helped, waited := SplitShares()
	release, started := make(chan struct{}), make(chan struct{})
	c := &claims{n: 2, ranges: 2, align: 1, panics: make([]any, 2), done: make(chan struct{}, 1)}
	c.fn = func(r, lo, hi int) {
		if r == 0 { // the helper's
			close(started)
			<-release
		}
	}
	go c.workFrom(0, 0)
	<-started
	go func() {
		for !c.waiting.Load() { // the caller, past its spin, blocks
			time.Sleep(time.Millisecond)
		}
		time.Sleep(5 * time.Millisecond)
		close(release)
	}()
	c.workFrom(1, 1)
	c.wait()
	c.tally()
	r, h, w := SplitShares()
	assert.Equal(t, uint64(2), r-ranges, "ranges run")
	assert.Equal(t, uint64(1), h-helped, "ranges a helper ran")
	assert.GreaterOrEqual(t, w-waited, waitSpin+5*time.Millisecond, "the caller's wait")
}

// parallelPasses runs every range of each pass once, each pass's before
// after the last range of the pass before it and before its own first
// range, whatever the number of workers (a crew of up to 4 on a machine of
// 4 cores, or of as many as GOMAXPROCS allows): three passes, as a two-pass
// gradient's sums, fold and x_backprop.
func TestParallelPassesOrder(t *testing.T) {
	for _, c := range []struct {
		procs  int
		affine bool
	}{{1, false}, {2, false}, {4, false}, {1, true}, {2, true}, {4, true}} {
		procs := c.procs
		t.Run(fmt.Sprintf("GOMAXPROCS=%d/affine=%v", procs, c.affine), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			for range 50 {
				var ran [3][7]atomic.Int32
				var done, befores [3]atomic.Int32
				// in returns pass i's function over ranges of width 10: it
				// checks the range and what ran before it.
				in := func(i, n int) func(r, lo, hi int) {
					return func(r, lo, hi int) {
						assert.Equal(t, [2]int{min(10*r, n), min(10*(r+1), n)}, [2]int{lo, hi})
						if i > 0 {
							assert.Equal(t, int32(1), befores[i].Load(), "pass %d range %d before its before", i, r)
						}
						if i+1 < 3 {
							assert.Zero(t, befores[i+1].Load(), "pass %d range %d after the next pass's before", i, r)
						}
						ran[i][r].Add(1)
						done[i].Add(1)
					}
				}
				before := func(i, want int) func() {
					return func() {
						assert.Equal(t, int32(want), done[i-1].Load(), "pass %d's before while pass %d ran", i, i-1)
						assert.Zero(t, done[i].Load(), "pass %d's before after it began", i)
						befores[i].Add(1)
					}
				}
				parallelPasses(crew{workers: 4, cores: 64},
					pass{n: 70, ranges: 7, align: 10, fn: in(0, 70)},
					pass{n: 30, ranges: 3, align: 10, fn: in(1, 30), before: before(1, 7)},
					pass{n: 65, ranges: 7, align: 10, reverse: true, affine: c.affine, fn: in(2, 65), before: before(2, 3)})
				for i, ranges := range []int{7, 3, 7} {
					for r := range ranges {
						assert.Equal(t, int32(1), ran[i][r].Load(), "pass %d, range %d", i, r)
					}
				}
				assert.Equal(t, [3]int32{0, 1, 1}, [3]int32{befores[0].Load(), befores[1].Load(), befores[2].Load()})
			}
		})
	}
}

// A panic in any pass, or in any pass's before, reaches the caller; no
// pass after it runs, and no helper is left waiting at a gate: the
// goroutines settle back to their count before the call, no helper stays
// reserved (helpersOut) and every pinned helper thread is free again.
func TestParallelPassesPanics(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	four := crew{workers: 4, cores: 64}
	boom := func(at string, where string) func() {
		return func() {
			if at == where {
				panic("boom in " + where)
			}
		}
	}
	order := []string{"first", "before middle", "middle", "before last", "last"}
	for _, at := range order {
		for _, affine := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/affine=%v", at, affine), func(t *testing.T) {
				// A first call starts whatever lasts (helper threads, where
				// the system has them); its helpers end before the count.
				parallelPasses(four, pass{n: 40, ranges: 4, align: 10, reverse: false, fn: func(int, int, int) {}})
				before := settledGoroutines()
				var ran [3]atomic.Int32
				in := func(i, at0 int, where string) func(r, _, _ int) {
					return func(r, _, _ int) {
						ran[i].Add(1)
						if r == at0 {
							boom(at, where)()
						}
					}
				}
				want := "kernels: worker panicked: boom in " + at
				if strings.HasPrefix(at, "before") {
					want = "boom in " + at
				}
				assert.PanicsWithValue(t, want, func() {
					parallelPasses(four,
						pass{n: 40, ranges: 4, align: 10, fn: in(0, 2, "first")},
						pass{n: 20, ranges: 2, align: 10, before: boom(at, "before middle"), fn: in(1, 1, "middle")},
						pass{n: 40, ranges: 4, align: 10, affine: affine, before: boom(at, "before last"), fn: in(2, 1, "last")})
				})
				for i, from := range []int{2, 4} { // the passes after the panic's
					if slices.Index(order, at) < from {
						assert.Zero(t, ran[i+1].Load(), "pass %d ran after a panic before it", i+1)
					}
				}
				assert.LessOrEqual(t, settledGoroutines(), before, "helpers left running")
				assert.Zero(t, helpersOut.Load(), "helpers still reserved")
				waitHelperThreadsFree(t)
			})
		}
	}
}

// settledGoroutines returns the goroutine count once it has stayed the same
// for 10 ms (helpers of a call that returned may still be ending), or after
// a second.
func settledGoroutines() int {
	n, since := runtime.NumGoroutine(), time.Now()
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline) && time.Since(since) < 10*time.Millisecond; {
		time.Sleep(time.Millisecond)
		if m := runtime.NumGoroutine(); m != n {
			n, since = m, time.Now()
		}
	}
	return n
}

// An affine pass has a worker run the ranges it ran in the pass before,
// last first, then the others left, first first, skipping those claimed.
func TestAffineClaimOrder(t *testing.T) {
	first := &claims{ranges: 6}
	first.owner = []int32{1, 2, 1, 2, 2, 1} // worker 0 ran 0, 2 and 5
	var order []int
	c := &claims{n: 60, ranges: 6, align: 10, after: first, taken: make([]atomic.Bool, 6), panics: make([]any, 2), done: make(chan struct{}, 1),
		fn: func(r, lo, hi int) {
			assert.Equal(t, [2]int{10 * r, 10 * (r + 1)}, [2]int{lo, hi})
			order = append(order, r)
		}}
	c.taken[3].Store(true) // worker 1 has claimed range 3
	c.workFrom(0, 0)
	assert.Equal(t, []int{5, 2, 0, 1, 4}, order)
	assert.Zero(t, c.pending.Load())
	c.workFrom(1, 1) // nothing left
	assert.Equal(t, []int{5, 2, 0, 1, 4}, order)
	assert.Zero(t, c.pending.Load())
}

// In a two-pass call on two workers, each worker runs its own block of the
// first pass's ranges (claims.workHome), and each range of an affine second
// pass runs on the goroutine that ran it in the first. The ranges'
// functions wait for each other so that the workers take turns: in the
// first pass one runs ranges 0 and 1 and the other 2 and 3 (0 meets 2, then
// 1 meets 3: neither worker is done with its block while the other has a
// range of its own left to take), and in the second each must take its own
// two ranges, last first, which the same barriers let no other steal.
func TestParallelPassesAffineOnSameWorker(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2)) // two workers, whatever the cores beyond two
	meet := func(t *testing.T, started []chan struct{}, r int) {
		other := map[int]int{0: 2, 2: 0, 1: 3, 3: 1}[r]
		close(started[r])
		select {
		case <-started[other]:
		case <-time.After(10 * time.Second):
			t.Errorf("range %d waited 10 s for range %d: the two workers did not run together", r, other)
		}
	}
	for i := range 40 {
		middle := i%2 == 1 // a one-range pass between: the affine pass follows the first still
		var firstBy, secondBy [4]uint64
		started1, started2 := make([]chan struct{}, 4), make([]chan struct{}, 4)
		for r := range 4 {
			started1[r], started2[r] = make(chan struct{}), make(chan struct{})
		}
		passes := []pass{pass{n: 4, ranges: 4, align: 1, fn: func(r, _, _ int) {
			firstBy[r] = goroutineID()
			meet(t, started1, r)
		}}}
		if middle {
			passes = append(passes, pass{n: 1, ranges: 1, align: 1, fn: func(int, int, int) {}})
		}
		passes = append(passes, pass{n: 4, ranges: 4, align: 1, affine: true, fn: func(r, _, _ int) {
			secondBy[r] = goroutineID()
			meet(t, started2, r)
		}})
		parallelPasses(crew{workers: 2, cores: 64}, passes...)
		require.NotEqual(t, firstBy[0], firstBy[2], "ranges 0 and 2 ran on one goroutine")
		require.Equal(t, firstBy[0], firstBy[1], "a worker's own block")
		require.Equal(t, firstBy[2], firstBy[3], "a worker's own block")
		assert.Equal(t, firstBy, secondBy, "middle pass %v: the affine pass's ranges ran on other goroutines than the first's", middle)
	}
}

// A first pass's worker runs its own block of ranges first, first first,
// then whatever is left of the others', last first; a range another has
// claimed is skipped.
func TestHomeClaimOrder(t *testing.T) {
	for _, r := range []struct {
		homes, block, ranges int
		taken                []int
		want                 []int
	}{
		{2, 0, 6, nil, []int{0, 1, 2, 5, 4, 3}},
		{2, 1, 6, []int{5}, []int{3, 4, 2, 1, 0}},
		{3, 1, 7, []int{0}, []int{2, 3, 6, 5, 4, 1}}, // blocks [0,2) [2,4) [4,7)
		{4, 3, 2, nil, []int{1, 0}},                  // more workers than ranges: blocks 0 and 2 empty, 3 is range 1
	} {
		var order []int
		c := &claims{n: r.ranges, ranges: r.ranges, align: 1, homes: r.homes, taken: make([]atomic.Bool, r.ranges),
			panics: make([]any, r.homes), done: make(chan struct{}, 1),
			fn: func(i, lo, hi int) {
				assert.Equal(t, [2]int{i, i + 1}, [2]int{lo, hi})
				order = append(order, i)
			}}
		for _, i := range r.taken {
			c.taken[i].Store(true)
		}
		c.workHome(0, r.block)
		assert.Equal(t, r.want, order, "%+v", r)
		assert.Zero(t, c.pending.Load())
	}
}

// A goroutine's home block is its own number, and so is a pinned thread's
// where the pinned threads are not one a CPU of the call's workers.
func TestHomeBlockOfAWorker(t *testing.T) {
	require.Equal(t, 1, home(1, -1, 3))
	require.Equal(t, 0, home(4, -1, 2))
	require.Equal(t, 1, home(1, -1, 2), "goroutines: their own number, whatever CPU they are on")
	require.Equal(t, 5, home(5, 1, 1000), "more workers than there are pinned threads: not the thread's slot")
	require.Equal(t, 1, home(1001, 3, 1000))
}

// goroutineID returns the calling goroutine's number, from its stack trace.
func goroutineID() uint64 {
	var buf [64]byte
	var id uint64
	fmt.Sscanf(string(buf[:runtime.Stack(buf[:], false)]), "goroutine %d ", &id)
	return id
}
