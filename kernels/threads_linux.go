//go:build linux && (amd64 || arm64)

package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Helper threads pinned to CPUs.
//
// A go statement's goroutine runs on whichever thread Go's scheduler wakes
// for it, and Linux puts a woken thread where it last ran or beside the
// thread that woke it. Inside TensorFlow that was often the calling thread's
// own CPU, where the helper waited for the caller to finish its share, so
// the call ran on one core (docs/performance.md, "Helper threads pinned to
// CPUs"). So on Linux a
// call's helpers run on threads of gobn's own, one pinned to each CPU the
// process may use (the first maxHelperThreads of them), each asleep on a
// futex between calls (after polling for Tuning.Spin microseconds while
// calls come in a burst, serve): a call wakes threads pinned to CPUs other than the one it runs
// on, which start some tens of microseconds later and never on the
// caller's CPU. A call that finds no such thread free (other calls hold them), or a
// process whose GOMAXPROCS leaves no room for them (below), starts
// goroutines instead.

// helperThread is one pinned thread and the task a call hands it.
type helperThread struct {
	wake   atomic.Uint32 // the futex word, bumped for each task
	asleep atomic.Bool   // in or about to enter futexWait: a task must wake it
	busy   atomic.Bool   // from a call's claim until the task returns
	// nap, set by a call that runs on the thread's CPU, has it stop
	// polling and sleep: it cannot help that call, and would take turns
	// with it on the CPU.
	nap atomic.Bool
	fn  func(arg, slot int) // the task: fn(arg, slot)
	arg int
	// poll has the thread poll for its next task after this one: the call
	// came in a burst of calls (burst).
	poll bool
	cpu  int // the CPU it is pinned to, or -1 where pinning failed
	slot int // its position in helperThreads.all
}

var helperThreads struct {
	once sync.Once
	all  []*helperThread
}

// maxHelperThreads bounds the pinned threads: one a CPU of a two-socket
// server of 128 cores with SMT.
const maxHelperThreads = 256

// For tests: helperThreadTasks counts the tasks handed to pinned threads,
// helperThreadWakes the threads woken for one (rouse), and
// helperThreadSpins the tasks after which a thread polled before it slept
// (Tuning.Spin).
var helperThreadTasks, helperThreadWakes, helperThreadSpins atomic.Uint64

// helperThreadsPolling counts the pinned threads polling for a task now: a
// call that hands them its shares starts them within a microsecond, where
// a thread asleep starts some tens of microseconds after it is woken, and
// its caller pays the system call that wakes it (the plan counts on which:
// helpersPolling).
var helperThreadsPolling atomic.Int32

// helpersPolling returns how many helper threads poll for a task now.
func helpersPolling() int { return int(helperThreadsPolling.Load()) }

// helperThreadsUsable reports whether calls may hand their shares to the
// pinned threads: while GOMAXPROCS leaves a P for the caller and one more
// besides one per thread (NumCPU counts the CPUs the process may use, as
// startHelperThreads does; a process without room never starts them).
// Elsewhere helpers are goroutines, which do not poll.
func helperThreadsUsable() bool {
	return runtime.GOMAXPROCS(0) >= min(runtime.NumCPU(), maxHelperThreads)+2
}

// onHelperThreads hands fn(0), fn(1), ... to up to n free pinned threads on
// CPUs other than the caller's, each thread's fn(i, slot) with slot its
// position among the pinned threads, and returns how many it handed:
// fn(i) for i from that count on is the caller's to run; and the position
// of the thread on the caller's CPU (which it left out), -1 where there is
// none. With wake positive the caller
// wakes only the first wake threads, and each thread woken wakes wake more
// before it runs its task (a tree: waking fifteen threads one after the
// other keeps the caller from its own share for fifteen system calls). A
// thread asleep in a system call keeps its P (Go's token to run Go code)
// until Go's monitor thread takes it back, which can take 10 ms, so the
// threads are used only while GOMAXPROCS leaves a P for the caller and one
// more besides one per thread (capi sets 2·cores+4).
func onHelperThreads(n, wake int, poll bool, fn func(i, slot int)) (handed, callerSlot int) {
	if n == 0 || !helperThreadsUsable() {
		return 0, -1
	}
	helperThreads.once.Do(startHelperThreads)
	all := helperThreads.all // at most the NumCPU threads checked above
	if len(all) == 0 {
		return 0, -1
	}
	cpu := currentCPU()
	callerSlot = -1
	for i, t := range all {
		if t.cpu == cpu && cpu >= 0 {
			callerSlot = i
		}
	}
	crew := make([]*helperThread, 0, min(n, len(all)))
	// Threads that poll first, which start at once, then any free one.
	for _, first := range []bool{true, false} {
		for _, t := range all {
			if len(crew) == n {
				break
			}
			if t.cpu == cpu && cpu >= 0 {
				if first && !t.busy.Load() && !t.asleep.Load() {
					t.nap.Store(true) // polling where it cannot help this call
				}
				continue
			}
			if (first && t.asleep.Load()) || !t.busy.CompareAndSwap(false, true) {
				continue
			}
			crew = append(crew, t)
		}
	}
	task := fn
	if wake > 0 && wake < len(crew) {
		task = func(i, slot int) {
			lo, hi := wakes(len(crew), wake, i)
			for _, t := range crew[lo:hi] {
				t.rouse()
			}
			fn(i, slot)
		}
	}
	for i, t := range crew {
		t.fn, t.arg, t.poll = task, i, poll
		t.wake.Add(1) // publishes the task to the thread, which loads wake
	}
	lo, hi := wakes(len(crew), wake, -1)
	for _, t := range crew[lo:hi] {
		t.rouse() // the others are roused by those (task)
	}
	helperThreadTasks.Add(uint64(len(crew)))
	return len(crew), callerSlot
}

// wakes returns the threads [lo, hi) of a crew of n that thread i wakes
// (i = -1: the caller) when each wakes wake more (wake ≤ 0: the caller
// wakes all): the caller 0 to wake-1, thread i the wake after those that
// thread i-1 wakes.
func wakes(n, wake, i int) (lo, hi int) {
	if wake <= 0 || wake >= n {
		if i < 0 {
			return 0, n
		}
		return 0, 0
	}
	return min(n, wake*(i+1)), min(n, wake*(i+2))
}

// startHelperThreads starts one pinned thread per CPU the process may use,
// at most runtime.NumCPU (onHelperThreads' room check counts those), none
// where it may use only one.
func startHelperThreads() {
	cpus := allowedCPUs()
	if len(cpus) < 2 {
		return
	}
	cpus = cpus[:min(len(cpus), runtime.NumCPU(), maxHelperThreads)]
	all := make([]*helperThread, len(cpus))
	var started sync.WaitGroup
	for i, cpu := range cpus {
		all[i] = &helperThread{cpu: cpu, slot: i}
		started.Add(1)
		go all[i].serve(&started)
	}
	started.Wait()
	helperThreads.all = all
}

// serve pins the thread and runs the tasks handed to it, asleep on wake in
// between. After a task of a call that came in a burst of calls (burst: a
// chain of gradients, or a network's batch norms one after the other) it
// first polls wake for Tuning.Spin microseconds, so that the next call's
// task starts without a system call on either side; after one that came
// alone (a training step's convolutions between two batch norms) it sleeps
// at once, rather than take turns with TensorFlow's own threads on its CPU
// for polls that find nothing.
func (t *helperThread) serve(started *sync.WaitGroup) {
	runtime.LockOSThread() // for good: the pinned thread runs this goroutine alone
	if !pinThread(t.cpu) {
		t.cpu = -1
	}
	seen := t.wake.Load()
	started.Done()
	spin := time.Duration(0)
	for {
		if spin > 0 {
			helperThreadsPolling.Add(1)
			for start := time.Now(); t.wake.Load() == seen && !t.nap.Load() && time.Since(start) < spin; {
				yieldCPU()
			}
			helperThreadsPolling.Add(-1)
		}
		for t.wake.Load() == seen {
			t.asleep.Store(true)
			futexWait(&t.wake, seen) // at once where wake has moved on since
			t.asleep.Store(false)
		}
		seen = t.wake.Load()
		t.nap.Store(false)
		fn, arg, poll := t.fn, t.arg, t.poll
		t.fn = nil
		fn(arg, t.slot)
		spin = 0
		if poll {
			spin = time.Duration(CurrentTuning().Spin) * time.Microsecond
		}
		if spin > 0 {
			helperThreadSpins.Add(1) // before busy: a test that sees the thread free sees the count
		}
		t.busy.Store(false)
	}
}

// yieldCPU lets any other thread that waits for this CPU run first: a
// polling helper gives way to TensorFlow's threads on its core at once.
func yieldCPU() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

// rouse wakes t for the task just handed to it (wake bumped) where it
// sleeps; one still polling sees wake move. The two sides' stores come
// before their loads (asleep, then wake in the futex; wake, then asleep
// here), so one of them sees the other's.
func (t *helperThread) rouse() {
	if t.asleep.Load() {
		helperThreadWakes.Add(1)
		futexWake(&t.wake)
	}
}

const (
	futexWaitPrivate = 128 // FUTEX_WAIT | FUTEX_PRIVATE_FLAG
	futexWakePrivate = 129 // FUTEX_WAKE | FUTEX_PRIVATE_FLAG
)

// futexWait sleeps while *addr is val (or until a spurious wake-up). It
// enters the system call as Go's own blocking calls do, so the runtime
// counts the goroutine as in a system call.
func futexWait(addr *atomic.Uint32, val uint32) {
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitPrivate, uintptr(val), 0, 0, 0)
}

// futexWake wakes the thread asleep on addr, if any.
func futexWake(addr *atomic.Uint32) {
	syscall.RawSyscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakePrivate, 1, 0, 0, 0)
}

// cpuMask is a Linux CPU set of up to 1024 CPUs.
type cpuMask [16]uint64

// allowedCPUs returns the CPUs the calling thread may run on, in order.
func allowedCPUs() []int {
	var m cpuMask
	if _, _, e := syscall.RawSyscall(syscall.SYS_SCHED_GETAFFINITY, 0, unsafe.Sizeof(m), uintptr(unsafe.Pointer(&m))); e != 0 {
		return nil
	}
	var cpus []int
	for i := range len(m) * 64 {
		if m[i/64]&(1<<(i%64)) != 0 {
			cpus = append(cpus, i)
		}
	}
	return cpus
}

// pinThread restricts the calling thread to cpu, and reports whether it did.
func pinThread(cpu int) bool {
	var m cpuMask
	m[cpu/64] = 1 << (cpu % 64)
	_, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, unsafe.Sizeof(m), uintptr(unsafe.Pointer(&m)))
	return e == 0
}

// pinnedThreads returns how many pinned threads there are, to a caller
// that has handed tasks to them (onHelperThreads started them) or to one
// of them.
func pinnedThreads() int { return len(helperThreads.all) }

// currentCPU returns the CPU the calling thread runs on, or -1.
func currentCPU() int {
	var cpu uint32
	if _, _, e := syscall.RawSyscall(sysGetcpu, uintptr(unsafe.Pointer(&cpu)), 0, 0); e != 0 {
		return -1
	}
	return int(cpu)
}
