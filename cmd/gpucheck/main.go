// Command gpucheck is the C ABI the GPU check bundle's timing script
// (tools/gpucheck/bench.py) calls through ctypes: gobn's CUDA kernels on
// PyTorch's tensors and stream, built as a shared library that links no
// TensorFlow:
//
//	go build -buildmode=c-shared -tags cuda -o build/gpu/libgobncheck.so ./cmd/gpucheck
//
// (make gpu-bundle). The bundle checks correctness with the kernels' own Go
// tests, built into a test binary (kernels/cuda's gpu_test.go); this
// library is for timing them beside PyTorch's and cuDNN's in one process.
// Every export takes plain integers, floats and pointers (a call: a pointer
// to a gobncheck_call) and returns 0 on success or 1 on failure, the
// error's text then readable through gobncheck_error; a panic is recovered
// into such an error. Strings the
// library returns are its own, valid until the next call of the same
// function. Not safe for concurrent callers of the string-returning exports.
//
// Codes: dtype 0 float32, 1 half, 2 bfloat16 (cuda.DType); layout 0
// channels last (NHWC, NDHWC), 1 channels first (NCHW, NCDHW)
// (kernels.Layout). A tensor is N × C × S, S the product of its spatial
// dimensions.
//
// A call of a family's CUDA path is a gobncheck_call (the struct below:
// family, dtype, layout, dims, scalars, tensors), which two exports take:
//
//	gobncheck_gpu(call, stream, ws, ws_bytes): runs it (device pointers;
//	    a CUstream, a workspace and its bytes; the kernels/cuda package)
//	gobncheck_workspace(call) -> the workspace bytes it needs, or -1 on
//	    error: they depend on the addresses too (the kernels' vector width
//	    follows their alignment)
//	gobncheck_call_bytes() -> sizeof(gobncheck_call), for a caller to check
//	    its copy of the struct against
//
// The families: code, the scalars (flag, count, epsilon) each uses, and its
// tensors, in order:
//
//	0 fused: flag training, epsilon; y_backprop, x, scale, reserve_space_1,
//	    reserve_space_2, x_backprop, scale_backprop, offset_backprop
//	1 global: flag scale_after_normalization, epsilon (variance_epsilon);
//	    t, m, v, gamma, backprop, dx, dm, dv, db, dg
//	2 reduce: none; y_backprop, x, mean, sum_dy, sum_dy_xmu
//	3 apply: count, epsilon; y_backprop, x, scale, mean, variance, sum_dy,
//	    sum_dy_xmu, x_backprop
//
// In training, a fused call's reserve_space_2 is the inverse standard
// deviation (what stock's GPU forward saves).
//
// Besides: gobncheck_available (NULL when the CUDA path can run, else why
// not), gobncheck_launches (kernel launches per kernel name as a JSON
// object), gobncheck_info (a JSON object: Go version, cuda build tag, SIMD
// loops, GOMAXPROCS) and gobncheck_error.
package main

/*
#include <stdint.h>
#include <stdlib.h>

typedef struct {
	int family, dtype, layout;
	int64_t n, c, s;
	int flag;
	int64_t count;
	float epsilon;
	uintptr_t tensors[10];
} gobncheck_call;
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/gobn/gobn/kernels/cuda"
)

func main() {}

// cstrings holds the C strings the library hands out, one slot per export
// that returns one: each call frees its slot's previous string.
var cstrings struct {
	sync.Mutex
	slot map[string]*C.char
}

// keep stores s as slot's C string and returns it.
func keep(slot, s string) *C.char {
	cstrings.Lock()
	defer cstrings.Unlock()
	if cstrings.slot == nil {
		cstrings.slot = map[string]*C.char{}
	}
	if old := cstrings.slot[slot]; old != nil {
		C.free(unsafe.Pointer(old))
	}
	p := C.CString(s)
	cstrings.slot[slot] = p
	return p
}

// lastErr is the text of the last failed call's error, "" after none.
var lastErr struct {
	sync.Mutex
	msg string
}

// guard runs f, recovering a panic into an error, records the error for
// gobncheck_error and returns 0 for success, 1 for failure.
func guard(name string, f func() error) (rc C.int) {
	defer func() {
		if p := recover(); p != nil {
			setErr(fmt.Errorf("%s: panic: %v", name, p))
			rc = 1
		}
	}()
	if err := f(); err != nil {
		setErr(fmt.Errorf("%s: %w", name, err))
		return 1
	}
	return 0
}

func setErr(err error) {
	lastErr.Lock()
	lastErr.msg = err.Error()
	lastErr.Unlock()
}

// gobncheck_error returns the text of the last failed call's error (an empty
// string when none failed yet).
//
//export gobncheck_error
func gobncheck_error() *C.char {
	lastErr.Lock()
	msg := lastErr.msg
	lastErr.Unlock()
	return keep("error", msg)
}

// gobncheck_available returns NULL when the CUDA path can run (a driver and a
// GPU), else the reason.
//
//export gobncheck_available
func gobncheck_available() (out *C.char) {
	defer func() {
		if p := recover(); p != nil {
			out = keep("available", fmt.Sprintf("gpucheck: panic in cuda.Available: %v", p))
		}
	}()
	if err := cuda.Available(); err != nil {
		return keep("available", err.Error())
	}
	return nil
}

// gobncheck_launches returns cuda.Launches() as a JSON object, or NULL after
// an error.
//
//export gobncheck_launches
func gobncheck_launches() (out *C.char) {
	var s string
	if guard("launches", func() (err error) { s, err = launchesJSON(); return }) != 0 {
		return nil
	}
	return keep("launches", s)
}

// gobncheck_info returns the build facts as a JSON object.
//
//export gobncheck_info
func gobncheck_info() *C.char { return keep("info", infoJSON()) }

// goCall copies the C call.
func goCall(c *C.gobncheck_call) call {
	g := call{
		family: int(c.family), dtype: int(c.dtype), layout: int(c.layout),
		n: int64(c.n), c: int64(c.c), s: int64(c.s),
		flag: c.flag != 0, count: int64(c.count), epsilon: float32(c.epsilon),
	}
	for i, p := range c.tensors {
		g.tensors[i] = cuda.Ptr(p)
	}
	return g
}

// gobncheck_gpu runs the call on the stream and workspace given.
//
//export gobncheck_gpu
func gobncheck_gpu(c *C.gobncheck_call, stream, ws C.uintptr_t, wsBytes C.int64_t) C.int {
	return guard("gpu", func() error {
		j, err := goCall(c).job()
		if err != nil {
			return err
		}
		return j.run(cuda.Placement{Stream: cuda.Stream(stream), Workspace: cuda.Ptr(ws), WorkspaceBytes: int64(wsBytes)})
	})
}

// gobncheck_workspace returns the workspace bytes the call needs, or -1 on
// error.
//
//export gobncheck_workspace
func gobncheck_workspace(c *C.gobncheck_call) (bytes C.int64_t) {
	bytes = -1
	guard("workspace", func() error {
		j, err := goCall(c).job()
		if err == nil {
			bytes = C.int64_t(j.args.WorkspaceBytes())
		}
		return err
	})
	return bytes
}

// gobncheck_call_bytes returns sizeof(gobncheck_call).
//
//export gobncheck_call_bytes
func gobncheck_call_bytes() C.int64_t { return C.int64_t(C.sizeof_gobncheck_call) }
