package kernels

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
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
