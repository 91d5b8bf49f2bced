// Command gpucheck is the C ABI the GPU check bundle's timing script
// (tools/gpucheck/bench.py) calls through ctypes: gobn's CUDA kernels on
// PyTorch's tensors and stream, built as a shared library that links no
// TensorFlow:
//
//	go build -buildmode=c-shared -tags cuda -o build/gpu/libgobncheck.so ./internal/cmd/gpucheck
//
// (make gpu-bundle). The bundle checks correctness with the kernels' own Go
// tests, built into a test binary (kernels/cuda's gpu_test.go); this
// library is for timing them beside PyTorch's and cuDNN's in one process.
// Every export takes plain integers, floats and pointers and returns 0 on
// success or 1 on failure, the error's text then readable through
// gobncheck_error; a panic is recovered into such an error. Strings the
// library returns are its own, valid until the next call of the same
// function. Not safe for concurrent callers of the string-returning exports.
//
// Codes: dtype 0 float32, 1 half, 2 bfloat16 (cuda.DType); layout 0
// channels last (NHWC, NDHWC), 1 channels first (NCHW, NCDHW)
// (kernels.Layout). A tensor is N × C × S, S the product of its spatial
// dimensions.
//
// The families, each as a GPU entry (device pointers, then stream, workspace
// and workspace bytes; the kernels/cuda package) with a workspace query:
//
//	gobncheck_fused_gpu(dtype, layout, N, C, S, training, epsilon,
//	    y_backprop, x, scale, reserve_space_1, reserve_space_2,
//	    x_backprop, scale_backprop, offset_backprop, stream, ws, ws_bytes)
//	gobncheck_global_gpu(dtype, layout, N, C, S, scale_after_normalization,
//	    variance_epsilon, t, m, v, gamma, backprop, dx, dm, dv, db, dg, ...)
//	gobncheck_reduce_gpu(dtype, layout, N, C, S,
//	    y_backprop, x, mean, sum_dy, sum_dy_xmu, ...)
//	gobncheck_apply_gpu(dtype, layout, N, C, S, count, epsilon,
//	    y_backprop, x, scale, mean, variance, sum_dy, sum_dy_xmu, x_backprop, ...)
//	gobncheck_{fused,global,reduce,apply}_workspace(the GPU entry's arguments
//	    before stream) -> bytes, or -1 on error: the workspace depends on the
//	    addresses too (the kernels' vector width follows their alignment)
//
// In training, the fused entry's reserve_space_2 is the inverse standard
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
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/gobn/gobn/kernels"
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

func dims(layout C.int, n, c, s C.int64_t) (kernels.Dims, error) {
	return makeDims(int(layout), int64(n), int64(c), int64(s))
}

func placement(stream, ws C.uintptr_t, wsBytes C.int64_t) cuda.Placement {
	return cuda.Placement{Stream: cuda.Stream(stream), Workspace: cuda.Ptr(ws), WorkspaceBytes: int64(wsBytes)}
}

func ptr(p C.uintptr_t) cuda.Ptr { return cuda.Ptr(p) }

// The GPU entries and the workspace queries share one builder of the cuda
// package's args per family: a workspace depends on the addresses too (the
// vector width the kernels run with follows their alignment).

func fusedArgs(dtype, layout C.int, n, c, s C.int64_t, training C.int, epsilon C.float,
	yBackprop, x, scale, reserve1, reserve2, xBackprop, scaleBackprop, offsetBackprop C.uintptr_t) (cuda.FusedGradArgs, error) {
	d, err := dims(layout, n, c, s)
	return cuda.FusedGradArgs{
		Dims: d, DType: cuda.DType(dtype), Training: training != 0,
		YBackprop: ptr(yBackprop), X: ptr(x), Scale: ptr(scale),
		ReserveSpace1: ptr(reserve1), ReserveSpace2: ptr(reserve2), Epsilon: float32(epsilon),
		XBackprop: ptr(xBackprop), ScaleBackprop: ptr(scaleBackprop), OffsetBackprop: ptr(offsetBackprop),
	}, err
}

func globalArgs(dtype, layout C.int, n, c, s C.int64_t, scaleAfter C.int, epsilon C.float,
	t, m, v, gamma, backprop, dx, dm, dv, db, dg C.uintptr_t) (cuda.GlobalNormalizationArgs, error) {
	d, err := dims(layout, n, c, s)
	return cuda.GlobalNormalizationArgs{
		Dims: d, DType: cuda.DType(dtype),
		T: ptr(t), M: ptr(m), V: ptr(v), Gamma: ptr(gamma), Backprop: ptr(backprop),
		VarianceEpsilon: float32(epsilon), ScaleAfterNormalization: scaleAfter != 0,
		DX: ptr(dx), DM: ptr(dm), DV: ptr(dv), DB: ptr(db), DG: ptr(dg),
	}, err
}

func reduceArgs(dtype, layout C.int, n, c, s C.int64_t,
	yBackprop, x, mean, sumDy, sumDyXmu C.uintptr_t) (cuda.GradReduceArgs, error) {
	d, err := dims(layout, n, c, s)
	return cuda.GradReduceArgs{
		Dims: d, DType: cuda.DType(dtype),
		YBackprop: ptr(yBackprop), X: ptr(x), Mean: ptr(mean),
		SumDy: ptr(sumDy), SumDyXmu: ptr(sumDyXmu),
	}, err
}

func applyArgs(dtype, layout C.int, n, c, s C.int64_t, count C.int64_t, epsilon C.float,
	yBackprop, x, scale, mean, variance, sumDy, sumDyXmu, xBackprop C.uintptr_t) (cuda.GradApplyArgs, error) {
	d, err := dims(layout, n, c, s)
	return cuda.GradApplyArgs{
		Dims: d, DType: cuda.DType(dtype),
		YBackprop: ptr(yBackprop), X: ptr(x), Scale: ptr(scale), Mean: ptr(mean),
		Variance: ptr(variance), SumDy: ptr(sumDy), SumDyXmu: ptr(sumDyXmu),
		Count: int64(count), Epsilon: float32(epsilon), XBackprop: ptr(xBackprop),
	}, err
}

// run runs a GPU entry: the launch of the args a family's builder makes,
// on the stream and workspace at p.
func run[A any](name string, args func() (A, error), launch func(A, cuda.Placement) error, p cuda.Placement) C.int {
	return guard(name, func() error {
		a, err := args()
		if err != nil {
			return err
		}
		return launch(a, p)
	})
}

// workspace runs a workspace query: the bytes, or -1 on error.
func workspace(name string, f func() (int64, error)) (bytes C.int64_t) {
	bytes = -1
	guard(name, func() error {
		n, err := f()
		if err == nil {
			bytes = C.int64_t(n)
		}
		return err
	})
	return bytes
}

//export gobncheck_fused_gpu
func gobncheck_fused_gpu(dtype, layout C.int, n, c, s C.int64_t, training C.int, epsilon C.float,
	yBackprop, x, scale, reserve1, reserve2, xBackprop, scaleBackprop, offsetBackprop C.uintptr_t,
	stream, ws C.uintptr_t, wsBytes C.int64_t) C.int {
	return run("fused_gpu", func() (cuda.FusedGradArgs, error) {
		return fusedArgs(dtype, layout, n, c, s, training, epsilon,
			yBackprop, x, scale, reserve1, reserve2, xBackprop, scaleBackprop, offsetBackprop)
	}, cuda.FusedGrad, placement(stream, ws, wsBytes))
}

//export gobncheck_fused_workspace
func gobncheck_fused_workspace(dtype, layout C.int, n, c, s C.int64_t, training C.int, epsilon C.float,
	yBackprop, x, scale, reserve1, reserve2, xBackprop, scaleBackprop, offsetBackprop C.uintptr_t) C.int64_t {
	return workspace("fused_workspace", func() (int64, error) {
		a, err := fusedArgs(dtype, layout, n, c, s, training, epsilon,
			yBackprop, x, scale, reserve1, reserve2, xBackprop, scaleBackprop, offsetBackprop)
		return a.WorkspaceBytes(), err
	})
}

//export gobncheck_global_gpu
func gobncheck_global_gpu(dtype, layout C.int, n, c, s C.int64_t, scaleAfter C.int, epsilon C.float,
	t, m, v, gamma, backprop, dx, dm, dv, db, dg C.uintptr_t,
	stream, ws C.uintptr_t, wsBytes C.int64_t) C.int {
	return run("global_gpu", func() (cuda.GlobalNormalizationArgs, error) {
		return globalArgs(dtype, layout, n, c, s, scaleAfter, epsilon, t, m, v, gamma, backprop, dx, dm, dv, db, dg)
	}, cuda.GlobalNormalizationGrad, placement(stream, ws, wsBytes))
}

//export gobncheck_global_workspace
func gobncheck_global_workspace(dtype, layout C.int, n, c, s C.int64_t, scaleAfter C.int, epsilon C.float,
	t, m, v, gamma, backprop, dx, dm, dv, db, dg C.uintptr_t) C.int64_t {
	return workspace("global_workspace", func() (int64, error) {
		a, err := globalArgs(dtype, layout, n, c, s, scaleAfter, epsilon, t, m, v, gamma, backprop, dx, dm, dv, db, dg)
		return a.WorkspaceBytes(), err
	})
}

//export gobncheck_reduce_gpu
func gobncheck_reduce_gpu(dtype, layout C.int, n, c, s C.int64_t,
	yBackprop, x, mean, sumDy, sumDyXmu C.uintptr_t,
	stream, ws C.uintptr_t, wsBytes C.int64_t) C.int {
	return run("reduce_gpu", func() (cuda.GradReduceArgs, error) {
		return reduceArgs(dtype, layout, n, c, s, yBackprop, x, mean, sumDy, sumDyXmu)
	}, cuda.GradReduce, placement(stream, ws, wsBytes))
}

//export gobncheck_reduce_workspace
func gobncheck_reduce_workspace(dtype, layout C.int, n, c, s C.int64_t,
	yBackprop, x, mean, sumDy, sumDyXmu C.uintptr_t) C.int64_t {
	return workspace("reduce_workspace", func() (int64, error) {
		a, err := reduceArgs(dtype, layout, n, c, s, yBackprop, x, mean, sumDy, sumDyXmu)
		return a.WorkspaceBytes(), err
	})
}

//export gobncheck_apply_gpu
func gobncheck_apply_gpu(dtype, layout C.int, n, c, s C.int64_t, count C.int64_t, epsilon C.float,
	yBackprop, x, scale, mean, variance, sumDy, sumDyXmu, xBackprop C.uintptr_t,
	stream, ws C.uintptr_t, wsBytes C.int64_t) C.int {
	return run("apply_gpu", func() (cuda.GradApplyArgs, error) {
		return applyArgs(dtype, layout, n, c, s, count, epsilon,
			yBackprop, x, scale, mean, variance, sumDy, sumDyXmu, xBackprop)
	}, cuda.GradApply, placement(stream, ws, wsBytes))
}

//export gobncheck_apply_workspace
func gobncheck_apply_workspace(dtype, layout C.int, n, c, s C.int64_t, count C.int64_t, epsilon C.float,
	yBackprop, x, scale, mean, variance, sumDy, sumDyXmu, xBackprop C.uintptr_t) C.int64_t {
	return workspace("apply_workspace", func() (int64, error) {
		a, err := applyArgs(dtype, layout, n, c, s, count, epsilon,
			yBackprop, x, scale, mean, variance, sumDy, sumDyXmu, xBackprop)
		return a.WorkspaceBytes(), err
	})
}
