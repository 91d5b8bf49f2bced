package main

// #include "gobn.h"
import "C"

import (
	"fmt"
	"os"
	"runtime"
	"runtime/cgo"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/gobn/gobn/opdef"
)

// Kernel calls handed to Go's own threads (handoff.c has the why). With
// GOBN_HANDOFF=1 in the environment, a CPU kernel's calls come as jobs on
// C's queue: goroutines wait for the eventfd that counts them through Go's
// netpoller, and each runs the jobs it takes with no call into C and no
// system call but raw ones, which Go's scheduler does not see.
//
// An experiment: GOBN_HANDOFF_SERVERS=n sets the number of serving
// goroutines (default: one per CPU), GOBN_HANDOFF_PIN=1 moves the thread
// that runs a job to the CPU its TensorFlow thread queued it from.

// handoffCalls counts the calls run from the queue, for the tests.
var handoffCalls atomic.Uint64

var handoff struct {
	once sync.Once
	ok   bool
}

const (
	efdSemaphore = 1       // EFD_SEMAPHORE: a read takes one job
	efdNonblock  = 0x800   // EFD_NONBLOCK, as O_NONBLOCK
	efdCloexec   = 0x80000 // EFD_CLOEXEC
)

// serveHandoff reports whether kernels hand their calls to Go's threads:
// GOBN_HANDOFF=1, and the queue's eventfd and goroutines are up (started by
// the first call).
func serveHandoff() bool {
	handoff.once.Do(func() {
		if os.Getenv("GOBN_HANDOFF") != "1" {
			return
		}
		fd, _, e := syscall.RawSyscall(syscall.SYS_EVENTFD2, 0, efdSemaphore|efdNonblock|efdCloexec, 0)
		if e != 0 {
			return
		}
		conn, err := os.NewFile(fd, "gobn-jobs").SyscallConn() // non-blocking: Go's netpoller watches it
		if err != nil {
			return
		}
		// No TensorFlow thread holds a P now: one per core is enough,
		// and leaves the kernels' pinned helper threads (which sleep in a
		// system call that holds one) unused.
		if os.Getenv("GOMAXPROCS") == "" {
			runtime.GOMAXPROCS(runtime.NumCPU())
		}
		for range handoffServers() {
			go serveJobs(conn)
		}
		(*atomic.Int32)(unsafe.Pointer(&C.gobn_handoff_fd)).Store(int32(fd))
		handoff.ok = true
	})
	return handoff.ok
}

// serveJobs runs the queue's jobs as the eventfd counts them, one a read.
// A goroutine waiting for the eventfd holds no P, and the read is a raw
// system call, so a call wakes no Go thread but the one that runs it.
func serveJobs(conn syscall.RawConn) {
	var n uint64
	read := func(fd uintptr) bool {
		_, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&n)), unsafe.Sizeof(n))
		return e == 0 // EAGAIN: no job yet, wait for the netpoller
	}
	for {
		if conn.Read(read) != nil {
			return
		}
		serveJob(popJob())
	}
}

// popJob takes the first job of the queue, which holds one for each count
// the eventfd gave (a job is queued before it is counted).
func popJob() *C.gobn_job {
	q := &C.gobn_jobs
	lock := (*atomic.Int32)(unsafe.Pointer(&q.lock))
	for !lock.CompareAndSwap(0, 1) {
		runtime.Gosched()
	}
	j := q.head
	q.head = j.next
	if q.head == nil {
		q.tail = nil
	}
	lock.Store(0)
	return j
}

// serveJob runs job j and hands it back: state 1 wakes its thread, and state
// 2 says Go is done with it.
func serveJob(j *C.gobn_job) {
	pinned := os.Getenv("GOBN_HANDOFF_PIN") == "1" && j.cpu >= 0 && setAffinity(cpuMaskOf(int(j.cpu)))
	if pinned {
		defer setAffinity(allCPUs)
	}
	if err := runJob(j); err != nil {
		j.code = C.int(statusCode(err))
		msg := unsafe.Slice((*byte)(unsafe.Pointer(&j.message[0])), len(j.message))
		msg[copy(msg[:len(msg)-1], err.Error())] = 0
	}
	state := (*atomic.Uint32)(unsafe.Pointer(&j.state))
	state.Store(1)
	syscall.RawSyscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(&j.state)), futexWakePrivate, 1, 0, 0, 0)
	state.Store(2)
}

const futexWakePrivate = 129 // FUTEX_WAKE | FUTEX_PRIVATE_FLAG

// jobCall is a job's tensors as Go sees them, pooled as call is.
type jobCall struct {
	in       [C.GOBN_MAX_INPUTS]tensor
	out      [C.GOBN_MAX_OUTPUTS]tensor
	dims     [(C.GOBN_MAX_INPUTS + C.GOBN_MAX_OUTPUTS) * C.GOBN_INLINE_DIMS]int64
	allocate allocator // its allocated method, made once
}

var jobCalls = sync.Pool{New: func() any {
	c := new(jobCall)
	c.allocate = c.allocated
	return c
}}

// runJob runs the kernel of job j on its tensors; a panic is an Internal
// error, as in gobnCompute.
func runJob(j *C.gobn_job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = internalError(fmt.Sprintf("gobn: panic in kernel: %v", p))
		}
	}()
	handoffCalls.Add(1)
	k := cgo.Handle(j.kernel).Value().(*kernel)
	k.calls.Add(1)
	if int(j.num_inputs) != len(k.op.Inputs) { // TensorFlow checks the op's signature first
		return internalError(fmt.Sprintf("%s: got %d inputs, want %d", k.op.Name, j.num_inputs, len(k.op.Inputs)))
	}
	c := jobCalls.Get().(*jobCall)
	defer jobCalls.Put(c)
	dims := c.dims[:]
	describe := func(ts []C.gobn_tensor, out []tensor) {
		for i := range ts {
			d := &ts[i]
			n := int(d.ndims)
			out[i] = tensor{dtype: opdef.DType(d.dtype), dims: dims[:n:n], data: d.data, bytes: int(d.bytes)}
			for k := range n {
				dims[k] = int64(d.dims[k])
			}
			dims = dims[n:]
		}
	}
	describe(j.in[:j.num_inputs], c.in[:])
	describe(j.out[:j.num_outputs], c.out[:])
	return k.compute(c.in[:j.num_inputs], c.allocate, nil)
}

// allocated is a job's allocator: it hands out the output C allocated as
// outputSpec says, once compute asks for the same.
func (c *jobCall) allocated(i int, dtype opdef.DType, dims []int64, _ inputSet) (tensor, error) {
	out := c.out[i]
	if out.dtype != dtype || !slices.Equal(out.dims, dims) {
		return tensor{}, internalError(fmt.Sprintf("gobn: output %d allocated as %s%s, wanted %s%s",
			i, out.dtype, opdef.ShapeString(out.dims), dtype, opdef.ShapeString(dims)))
	}
	return out, nil
}

func handoffServers() int {
	if n, err := strconv.Atoi(os.Getenv("GOBN_HANDOFF_SERVERS")); err == nil {
		return n
	}
	return runtime.NumCPU()
}

type cpuMask [16]uint64

var allCPUs = func() (m cpuMask) {
	syscall.RawSyscall(syscall.SYS_SCHED_GETAFFINITY, 0, unsafe.Sizeof(m), uintptr(unsafe.Pointer(&m)))
	return m
}()

func cpuMaskOf(cpu int) (m cpuMask) {
	m[cpu/64] = 1 << (cpu % 64)
	return m
}

func setAffinity(m cpuMask) bool {
	_, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, unsafe.Sizeof(m), uintptr(unsafe.Pointer(&m)))
	return e == 0
}
