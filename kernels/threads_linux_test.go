//go:build linux && (amd64 || arm64)

package kernels

import (
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// helperThreadsOrSkip starts the pinned threads and returns them, with
// GOMAXPROCS raised so that calls use them (as capi's setting does); it
// skips where the process may use one CPU only, which has none.
func helperThreadsOrSkip(t *testing.T) []*helperThread {
	helperThreads.once.Do(startHelperThreads)
	all := helperThreads.all
	if len(all) == 0 {
		t.Skipf("no helper threads: the process may use %d CPU(s)", len(allowedCPUs()))
	}
	prev := runtime.GOMAXPROCS(len(all) + 2)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	idle(t, all) // a thread may still be returning from an earlier test's call
	return all
}

// Each helper thread runs on the one CPU it is pinned to, a CPU of its own,
// and a call hands tasks to every thread but the one on its own CPU.
func TestHelperThreadsPinned(t *testing.T) {
	all := helperThreadsOrSkip(t)
	type seen struct {
		cpu  int
		mask []int
	}
	got := make([]seen, len(all))
	var wg sync.WaitGroup
	wg.Add(len(all))
	handed, _ := onHelperThreads(len(all), 0, false, func(i, _ int) {
		defer wg.Done()
		got[i] = seen{currentCPU(), allowedCPUs()}
	})
	for range len(all) - handed {
		wg.Done()
	}
	wg.Wait()
	require.Equal(t, len(all)-1, handed, "threads handed a task: all but the caller's CPU's")
	cpus := map[int]bool{}
	for i, s := range got[:handed] {
		require.Len(t, s.mask, 1, "task %d: thread not pinned to one CPU: %v", i, s.mask)
		assert.Equal(t, s.mask[0], s.cpu, "task %d ran off its thread's CPU", i)
		assert.False(t, cpus[s.cpu], "task %d: CPU %d holds two threads", i, s.cpu)
		cpus[s.cpu] = true
	}
	idle(t, all)
}

// parallelPasses hands its helpers to pinned threads where GOMAXPROCS leaves
// room for them, goroutines where it does not, and runs every range once
// either way.
func TestParallelPassesOnHelperThreads(t *testing.T) {
	all := helperThreadsOrSkip(t)
	const ranges = 16
	workers := min(len(all), runtime.NumCPU(), ranges)
	for _, roomy := range []bool{true, false} {
		if !roomy {
			runtime.GOMAXPROCS(len(all) + 1)
		}
		before := helperThreadTasks.Load()
		var ran [ranges]atomic.Int32
		for range 20 {
			parallelPasses(crew{workers: workers, cores: 64}, pass{n: ranges, ranges: ranges, align: 1, reverse: false, fn: func(r, _, _ int) {
				ran[r].Add(1)
			}})
			idle(t, all) // a thread still returning from the last call is not free
		}
		for r := range ran {
			assert.Equal(t, int32(20), ran[r].Load(), "range %d", r)
		}
		handed := helperThreadTasks.Load() - before
		if roomy {
			helpers := min(workers, runtime.GOMAXPROCS(0)) - 1
			assert.Equal(t, uint64(20*helpers), handed, "helpers on pinned threads")
		} else {
			assert.Zero(t, handed, "pinned threads used with GOMAXPROCS %d", runtime.GOMAXPROCS(0))
		}
	}
}

// idle waits until no helper thread is busy, or fails after a second.
func idle(t *testing.T, all []*helperThread) {
	deadline := time.Now().Add(time.Second)
	for _, th := range all {
		for th.busy.Load() {
			if time.Now().After(deadline) {
				t.Fatalf("thread on CPU %d still busy after a second", th.cpu)
			}
			runtime.Gosched()
		}
	}
}

// A crew's threads are each woken once, by the caller or by a thread woken
// before it, in a tree of depth log_wake(n).
func TestWakeTree(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7, 15, 63, 255} {
		for _, wake := range []int{0, 1, 2, 4, 300} {
			woken := make([]int, n) // by whom, +2 (0: not yet)
			depth := make([]int, n)
			lo, hi := wakes(n, wake, -1)
			for j := lo; j < hi; j++ {
				woken[j], depth[j] = 1, 1
			}
			for i := range n {
				require.NotZero(t, woken[i], "n %d wake %d: thread %d runs before anyone wakes it", n, wake, i)
				lo, hi := wakes(n, wake, i)
				for j := lo; j < hi; j++ {
					require.Zero(t, woken[j], "n %d wake %d: thread %d woken twice", n, wake, j)
					require.Greater(t, j, i)
					woken[j], depth[j] = i+2, depth[i]+1
				}
			}
			if wake >= 2 && wake < n {
				require.LessOrEqual(t, slices.Max(depth), 1+int(math.Ceil(math.Log(float64(n))/math.Log(float64(wake)))),
					"n %d wake %d", n, wake)
			}
		}
	}
}

// With Tuning.Spin a thread polls for its next task after each task of a
// call in a burst: one handed to it while it polls needs no futex wake;
// after a task of a call that came alone, or once the spin is 0 again, the
// thread sleeps after its task and the next one wakes it. The
// thread is one of the test's own, pinned to the first CPU the process may
// use, so no call of another test hands it a task.
func TestHelperThreadSpin(t *testing.T) {
	cpus := allowedCPUs()
	require.NotEmpty(t, cpus)
	th := &helperThread{cpu: cpus[0]}
	var started sync.WaitGroup
	started.Add(1)
	go th.serve(&started)
	started.Wait()
	// A spin of a second, longer than the test polls: past maxSpin, which
	// SetTuning would cap, so stored as it is.
	spinFor := func(us int) int {
		tu := CurrentTuning()
		prev := tu.Spin
		tu.Spin = us
		tuning.Store(&tu)
		return prev
	}
	defer spinFor(spinFor(1_000_000))
	var ran atomic.Int32
	poll := true
	hand := func() (woken uint64) {
		before := helperThreadWakes.Load()
		require.True(t, th.busy.CompareAndSwap(false, true), "the thread is still busy")
		th.fn, th.arg, th.poll = func(int, int) { ran.Add(1) }, 0, poll
		th.wake.Add(1)
		th.rouse()
		woken = helperThreadWakes.Load() - before
		deadline := time.Now().Add(5 * time.Second)
		for th.busy.Load() {
			require.True(t, time.Now().Before(deadline), "the task did not run in 5 s")
			runtime.Gosched()
		}
		return woken
	}
	untilAsleep := func() {
		deadline := time.Now().Add(5 * time.Second)
		for !th.asleep.Load() {
			require.True(t, time.Now().Before(deadline), "the thread did not sleep in 5 s")
			time.Sleep(time.Millisecond)
		}
	}
	untilAsleep()
	spins := helperThreadSpins.Load()
	require.Equal(t, uint64(1), hand(), "the first task wakes the thread asleep since it started")
	for i := range 10 {
		require.False(t, th.asleep.Load(), "task %d: the thread slept while it should poll", i)
		require.Zero(t, hand(), "task %d handed to a polling thread woke it", i)
	}
	require.Equal(t, uint64(11), helperThreadSpins.Load()-spins, "tasks followed by a poll")
	poll = false
	require.Zero(t, hand(), "a task of a call that came alone, to the polling thread")
	untilAsleep()
	require.Equal(t, uint64(11), helperThreadSpins.Load()-spins, "a task of a call that came alone is followed by no poll")
	poll = true
	require.Equal(t, uint64(1), hand(), "a task handed to the thread asleep after a call that came alone")
	spinFor(0)
	require.Zero(t, hand(), "the last task of the polling thread")
	untilAsleep()
	require.Equal(t, uint64(1), hand(), "a task handed to the thread asleep after spin 0")
	require.Equal(t, int32(15), ran.Load())
	// The last task ends the thread's goroutine, and with it the thread.
	th.fn, th.arg = func(int, int) { runtime.Goexit() }, 0
	th.wake.Add(1)
	th.rouse()
}

// waitHelperThreadsFree fails unless every pinned helper thread started so
// far is free within a second (one stuck at a gate never is).
func waitHelperThreadsFree(t *testing.T) {
	t.Helper()
	idle(t, helperThreads.all)
}

// A call that comes alone leaves its helpers asleep, and on 2 cores splits
// no tensor of 2^18 elements; the next call, in a burst after it, splits
// that tensor (its plan counts on its helper polling after it) and its
// helper polls when its task is done; the call after that finds it polling
// and hands it its share without a wake.
func TestBurstLeavesHelpersPolling(t *testing.T) {
	all := helperThreadsOrSkip(t)
	pinTestThread(t, allowedCPUs()[0]) // every call from one CPU: the helper of one call is the next's too
	prevMachine := setMachine(Machine{Cores: 2, L2: 2 << 20, L3: 32 << 20, L3Cores: 2})
	defer setMachine(prevMachine)
	prevTuning := CurrentTuning()
	defer SetTuning(prevTuning)
	tu := prevTuning
	tu.PerWorker, tu.Spin = 0, 0 // from the cores and the helpers
	SetTuning(tu)
	asleep := func() bool { // every thread, so that none polls as the first call starts
		for _, th := range all {
			if !th.asleep.Load() {
				return false
			}
		}
		return true
	}
	require.Eventually(t, asleep, 5*time.Second, time.Millisecond)
	tu.Spin = 1_000_000 // a second, past maxSpin (stored as it is): a poll a loaded test machine cannot miss
	tuning.Store(&tu)
	d := Dims{N: 1, C: 64, S: 1 << 12, Layout: ChannelsLast} // 2^18 elements
	n, C := d.Len(), int(d.C)
	g := FusedGradArgs[float32]{Dims: d, YBackprop: make([]float32, n), X: make([]float32, n), XBackprop: make([]float32, n),
		Scale: make([]float32, C), ReserveSpace1: make([]float32, C), ReserveSpace2: make([]float32, C),
		ScaleBackprop: make([]float32, C), OffsetBackprop: make([]float32, C), Epsilon: 1e-3}
	lastCallEnd.Store(0) // no call before: the first comes alone
	tasks, spins := helperThreadTasks.Load(), helperThreadSpins.Load()
	TrainingGrad(g)
	require.Equal(t, tasks, helperThreadTasks.Load(), "a call alone of 2^18 elements on 2 cores used a helper")
	TrainingGrad(g)
	require.Equal(t, tasks+1, helperThreadTasks.Load(), "the call in a burst handed its helper a task")
	idle(t, all)
	require.Equal(t, spins+1, helperThreadSpins.Load(), "the helper of a call in a burst polled after its task")
	require.Eventually(t, func() bool { return helpersPolling() == 1 }, time.Second, time.Millisecond)
	wakes := helperThreadWakes.Load()
	TrainingGrad(g)
	require.Equal(t, tasks+2, helperThreadTasks.Load(), "the call after the burst's handed its helper a task")
	require.Equal(t, wakes, helperThreadWakes.Load(), "the polling helper was woken")
	idle(t, all)
	tu.Spin = 0 // the threads sleep after their next task
	SetTuning(tu)
	TrainingGrad(g)
	idle(t, all)
	require.Eventually(t, asleep, 5*time.Second, time.Millisecond)
}

// pinTestThread locks the test's goroutine to its thread and pins that to
// cpu, until the test ends, when the thread gets its CPUs back.
func pinTestThread(t *testing.T, cpu int) {
	runtime.LockOSThread()
	cpus := allowedCPUs()
	require.True(t, pinThread(cpu), "pinning the test's thread to CPU %d", cpu)
	t.Cleanup(func() {
		var m cpuMask
		for _, c := range cpus {
			m[c/64] |= 1 << (c % 64)
		}
		syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, unsafe.Sizeof(m), uintptr(unsafe.Pointer(&m)))
		runtime.UnlockOSThread()
	})
}

// A call that runs on the CPU of a thread that polls has that thread stop
// polling and sleep (nap): it cannot help the call, and would take turns
// with it on the CPU; the call's share goes to a thread on another CPU.
func TestCallOnAPollingThreadsCPUNaps(t *testing.T) {
	all := helperThreadsOrSkip(t)
	if len(all) < 2 {
		t.Skip("one helper thread: no other CPU for the call's share")
	}
	th := all[0]
	pinTestThread(t, th.cpu)
	prev := CurrentTuning()
	defer SetTuning(prev)
	tu := prev
	tu.Spin = 1_000_000 // a second, past maxSpin (stored as it is): the thread would poll through the test
	tuning.Store(&tu)
	require.True(t, th.busy.CompareAndSwap(false, true))
	th.fn, th.arg, th.poll = func(int, int) {}, 0, true
	th.wake.Add(1)
	th.rouse()
	require.Eventually(t, func() bool { return !th.busy.Load() && !th.asleep.Load() && helpersPolling() > 0 },
		5*time.Second, time.Millisecond, "the thread did not start polling")
	var ran sync.WaitGroup
	ran.Add(1)
	handed, _ := onHelperThreads(1, 0, false, func(int, int) { ran.Done() })
	require.Equal(t, 1, handed, "the call's share went to no thread")
	ran.Wait()
	start := time.Now()
	require.Eventually(t, th.asleep.Load, 5*time.Second, time.Millisecond, "the polling thread on the call's CPU did not nap")
	require.Less(t, time.Since(start), 500*time.Millisecond, "the thread slept only when its poll of a second ran out")
	idle(t, all)
}

// With a pinned thread on each of the process's CPUs, each worker of a call
// on all of them runs first the block of the first pass's ranges of its
// CPU's position among the threads', whichever worker it is: range r of a
// pass of one range a worker (each waits for all to start, so none
// steals) runs on the r-th thread's CPU; the caller takes the block of the
// CPU whose thread it left out, so no helper's block is the caller's.
func TestHomeBlocksFollowTheCPUs(t *testing.T) {
	all := helperThreadsOrSkip(t)
	cpus := make([]int, len(all))
	for i, h := range all {
		cpus[i] = h.cpu
	}
	caller := goroutineID()
	for range 20 {
		var started sync.WaitGroup
		started.Add(len(all))
		ran := make([]int, len(all))
		by := make([]uint64, len(all))
		parallelPasses(crew{workers: len(all), cores: len(all)}, pass{n: len(all), ranges: len(all), align: 1, fn: func(r, _, _ int) {
			ran[r], by[r] = currentCPU(), goroutineID()
			started.Done()
			started.Wait()
		}})
		for r := range all {
			if by[r] != caller {
				assert.Equal(t, cpus[r], ran[r], "range %d ran on a helper off its CPU's block (CPUs %v)", r, cpus)
			}
		}
		assert.Contains(t, by, caller, "the caller ran none of its ranges")
		idle(t, all)
	}
}
