package kernels

import (
	"fmt"
	"runtime"
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
	c := &claims{n: 100, ranges: 4, size: 25, fn: func(r, lo, hi int) { calls[r].Add(1) },
		panics: make([]any, 2), done: make(chan struct{}, 1)}
	c.work(1) // the caller, alone
	c.wait()  // returns: nothing in flight
	c.work(0) // the helper, late
	for r := range calls {
		assert.Equal(t, int32(1), calls[r].Load(), "range %d", r)
	}
	assert.Equal(t, int64(0), c.pending.Load())
}

// The caller waits for a range a helper has claimed and not finished.
func TestClaimsWaitsForClaimedRange(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	var done atomic.Bool
	c := &claims{n: 2, ranges: 2, size: 1, panics: make([]any, 2), done: make(chan struct{}, 1)}
	c.fn = func(r, lo, hi int) {
		if r == 0 { // the helper's range
			close(started)
			<-release
			done.Store(true)
		}
	}
	go c.work(0)
	<-started
	returned := make(chan struct{})
	go func() {
		c.work(1)
		c.wait()
		assert.True(t, done.Load(), "wait returned before the helper's range was done")
		close(returned)
	}()
	time.Sleep(5 * time.Millisecond) // past the caller's spin: it blocks on done
	close(release)
	<-returned
}

// parallelPasses runs every range of each pass once, and between after the
// last range of the first pass and before the first of the second, whatever
// the number of workers.
func TestParallelPassesOrder(t *testing.T) {
	for _, procs := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			for range 50 {
				var first, second [7]atomic.Int32
				var firstDone, secondStarted, betweenCalls atomic.Int32
				parallelPasses(
					pass{70, 7, 10, false, func(r, lo, hi int) {
						assert.Equal(t, [2]int{10 * r, 10 * (r + 1)}, [2]int{lo, hi})
						assert.Zero(t, betweenCalls.Load(), "first-pass range %d after between", r)
						first[r].Add(1)
						firstDone.Add(1)
					}},
					func() {
						assert.Equal(t, int32(7), firstDone.Load(), "between before the first pass was done")
						assert.Zero(t, secondStarted.Load(), "between after the second pass began")
						betweenCalls.Add(1)
					},
					pass{65, 7, 10, true, func(r, lo, hi int) {
						assert.Equal(t, [2]int{min(10*r, 65), min(10*(r+1), 65)}, [2]int{lo, hi})
						assert.Equal(t, int32(1), betweenCalls.Load(), "second-pass range %d before between", r)
						secondStarted.Add(1)
						second[r].Add(1)
					}})
				for r := range first {
					assert.Equal(t, int32(1), first[r].Load(), "first pass, range %d", r)
					assert.Equal(t, int32(1), second[r].Load(), "second pass, range %d", r)
				}
			}
		})
	}
}

// A panic in either pass, or in between, reaches the caller, and no helper
// is left waiting at the gate.
func TestParallelPassesPanics(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	boom := func(at string, where string) func() {
		return func() {
			if at == where {
				panic("boom in " + where)
			}
		}
	}
	for _, at := range []string{"first", "between", "second"} {
		t.Run(at, func(t *testing.T) {
			// A first call starts whatever lasts (helper threads, where the
			// system has them).
			parallelPasses(pass{40, 4, 1, false, func(int, int, int) {}}, nil, pass{})
			before := runtime.NumGoroutine()
			var secondRan atomic.Int32
			assert.PanicsWithValue(t, func() any {
				if at == "between" {
					return "boom in between"
				}
				return "kernels: worker panicked: boom in " + at
			}(), func() {
				parallelPasses(
					pass{40, 4, 1, false, func(r, _, _ int) {
						if r == 2 {
							boom(at, "first")()
						}
					}},
					boom(at, "between"),
					pass{40, 4, 1, false, func(r, _, _ int) {
						secondRan.Add(1)
						if r == 1 {
							boom(at, "second")()
						}
					}})
			})
			if at != "second" {
				assert.Zero(t, secondRan.Load(), "the second pass ran after a panic before it")
			}
			// Helpers end on their own once the gate is open. (Not
			// assert.Eventually: it counts as a goroutine of its own.)
			deadline := time.Now().Add(time.Second)
			for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			assert.LessOrEqual(t, runtime.NumGoroutine(), before, "helpers left running")
		})
	}
}

// rangesFor cuts by size alone, into an even number of ranges from two on,
// at most maxRanges.
func TestRangesForEven(t *testing.T) {
	per := perRange[float32]()
	for _, c := range []struct{ n, want int }{
		{per - 1, 1}, {2*per - 1, 1}, {2 * per, 2}, {3 * per, 4}, {4*per + 1, 4}, {5 * per, 6},
		{15 * per, 16}, {17 * per, maxRanges}, {100 * per, maxRanges},
	} {
		require.Equal(t, c.want, rangesFor[float32](c.n), "n = %d ranges' worth", c.n/per)
	}
}
