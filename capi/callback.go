package main

// #include "gobn.h"
import "C"

import (
	"encoding/json"
	"fmt"
	"runtime/cgo"
	"sync"
	"sync/atomic"

	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/opdef"
)

// The exported functions below are what the C trampolines in register.c and
// registry_gen.c call. Each recovers from panics: a bug in gobn becomes an
// Internal error, never a crash of the host process.

//export gobnCreate
func gobnCreate(ctx *C.TF_OpKernelConstruction, op, flags C.int) (handle C.uintptr_t) {
	status := C.TF_NewStatus()
	defer C.TF_DeleteStatus(status)
	defer func() {
		if p := recover(); p != nil {
			setStatus(status, internalError(fmt.Sprintf("gobn: panic while creating a kernel: %v", p)))
			C.TF_OpKernelConstruction_Failure(ctx, status)
			handle = 0
		}
	}()
	k, err := newKernel(opdef.All[op], flags&C.GOBN_ON_GPU != 0, constructionAttrs{ctx: ctx, status: status})
	if err == nil {
		k.calls = &kernelCalls[op][flags]
	}
	if err != nil {
		setStatus(status, err)
		C.TF_OpKernelConstruction_Failure(ctx, status)
		return 0
	}
	return C.uintptr_t(cgo.NewHandle(k))
}

//export gobnCompute
func gobnCompute(handle C.uintptr_t, ctx *C.TF_OpKernelContext) {
	c := newCall(ctx)
	defer c.release()
	defer func() {
		if p := recover(); p != nil {
			setStatus(c.status, internalError(fmt.Sprintf("gobn: panic in kernel: %v", p)))
			C.TF_OpKernelContext_Failure(ctx, c.status)
		}
	}()
	k := cgo.Handle(handle).Value().(*kernel)
	k.calls.Add(1)
	if err := compute(k, c); err != nil {
		setStatus(c.status, err)
		C.TF_OpKernelContext_Failure(ctx, c.status)
	}
}

//export gobnDelete
func gobnDelete(handle C.uintptr_t) {
	defer func() { _ = recover() }()
	if handle != 0 {
		cgo.Handle(handle).Delete()
	}
}

//export gobnShape
func gobnShape(ctx *C.TF_ShapeInferenceContext, op C.int, status *C.TF_Status) {
	s := &shapeContext{ctx: ctx, status: status}
	defer s.release()
	defer func() {
		if p := recover(); p != nil {
			setStatus(status, internalError(fmt.Sprintf("gobn: panic in shape function: %v", p)))
		}
	}()
	if err := inferShapes(opdef.All[op], s); err != nil {
		setStatus(status, err)
	}
}

// goRuntimeC is goRuntime() as a C string, made once and never freed.
var goRuntimeC = sync.OnceValue(func() *C.char { return C.CString(goRuntime()) })

// gobnGoRuntime says which Go runtime the library was built with, for
// scripts/bench.py and the tests (through ctypes): the Go version, e.g.
// "go1.26.8-X:simd" (see runtime.go). It returns NULL if that cannot be said.
//
//export gobnGoRuntime
func gobnGoRuntime() (s *C.char) {
	defer func() {
		if recover() != nil {
			s = nil
		}
	}()
	return goRuntimeC()
}

// kernelCalls counts the compute calls of each op's kernels, by the flags
// they were registered with (gobn.h: GOBN_ON_GPU, GOBN_AS_STOCK).
var kernelCalls = make([][4]atomic.Uint64, len(opdef.All))

// gobnKernelCalls returns the compute calls of gobn's kernels since the
// library was loaded, as JSON: {"registered op name": {"CPU": n, "GPU": n}}
// for every kernel called at least once (the stock names are those of
// gobnEnable's kernels). It is how a caller can tell that gobn's kernels,
// not stock's, ran. The string is the caller's to free (libc free), or
// NULL on failure.
//
//export gobnKernelCalls
func gobnKernelCalls() (s *C.char) {
	defer func() {
		if recover() != nil {
			s = nil
		}
	}()
	calls := map[string]map[string]uint64{}
	for i, op := range opdef.All {
		for flags := range kernelCalls[i] {
			n := kernelCalls[i][flags].Load()
			if n == 0 {
				continue
			}
			name, device := op.Name, "CPU"
			if flags&C.GOBN_AS_STOCK != 0 {
				name = op.Stock
			}
			if flags&C.GOBN_ON_GPU != 0 {
				device = "GPU"
			}
			if calls[name] == nil {
				calls[name] = map[string]uint64{}
			}
			calls[name][device] = n
		}
	}
	b, err := json.Marshal(calls)
	if err != nil {
		return nil
	}
	return C.CString(string(b))
}

// gobnSplitStats returns kernels.SplitStats as JSON, {"calls": n,
// "max_ranges": n, "max_workers": n}: how the CPU kernels have split their
// work since the library was loaded, for the tests that mean to exercise
// the parallel split. The string is the caller's to free, or NULL.
//
//export gobnSplitStats
func gobnSplitStats() (s *C.char) {
	defer func() {
		if recover() != nil {
			s = nil
		}
	}()
	calls, ranges, workers := kernels.SplitStats()
	b, err := json.Marshal(map[string]any{"calls": calls, "max_ranges": ranges, "max_workers": workers})
	if err != nil {
		return nil
	}
	return C.CString(string(b))
}

// gobnEnable registers gobn's kernels under the stock ops' names with a
// priority above stock's (register.c's gobn_enable), once. It returns the
// number of kernels registered, or -1 with the reason in *msg (a string the
// caller frees).
//
//export gobnEnable
func gobnEnable(msg **C.char) (n C.int) {
	defer func() {
		if p := recover(); p != nil {
			*msg = C.CString(fmt.Sprintf("gobn: panic while enabling: %v", p))
			n = -1
		}
	}()
	n = C.gobn_enable()
	if n < 0 {
		*msg = C.CString(C.GoString(C.gobn_registration_error()))
	}
	return n
}

func compute(k *kernel, c *call) error {
	inputs, total, err := c.inputs(len(k.op.Inputs))
	if err != nil {
		return err
	}
	if total != len(k.op.Inputs) {
		return fmt.Errorf("%s: got %d inputs, want %d", k.op.Name, total, len(k.op.Inputs))
	}
	return k.compute(inputs, c.allocate, c.temp)
}

// newKernel reads the attrs the op declares.
func newKernel(op opdef.Op, onGPU bool, attrs constructionAttrs) (*kernel, error) {
	k := &kernel{op: op, onGPU: onGPU}
	var err error
	for _, a := range op.Attrs {
		switch a.Name {
		case "T":
			k.dtype, err = attrs.dtype(a.Name)
		case "epsilon", "variance_epsilon":
			k.epsilon, err = attrs.float(a.Name)
		case "data_format":
			k.dataFormat, err = attrs.string(a.Name)
		case "is_training":
			k.isTraining, err = attrs.bool(a.Name)
		case "scale_after_normalization":
			k.scaleAfterNormalization, err = attrs.bool(a.Name)
		}
		if err != nil {
			return nil, err
		}
	}
	return k, nil
}

// inferShapes gives every output its static shape: x_backprop (dx) takes x's
// (t's) shape, the 1-D outputs take the shape of the per-channel inputs, the
// placeholders [0], the count of BatchNormGradReduce []. It also rejects
// inputs whose known ranks or dims already break the op's rules.
func inferShapes(op opdef.Op, s *shapeContext) error {
	handles := make([]*C.TF_ShapeHandle, len(op.Inputs))
	dims := make([][]int64, len(op.Inputs))
	for i, in := range op.Inputs {
		minRank, maxRank := 0, -1
		if len(in.Ranks) > 0 {
			minRank, maxRank = in.Ranks[0], in.Ranks[len(in.Ranks)-1]
		}
		h, err := s.input(i, minRank, maxRank)
		if err != nil {
			return err
		}
		handles[i], dims[i] = h, s.dims(h)
	}
	if err := op.CheckStaticShapes(dims); err != nil {
		return err
	}
	for i, out := range op.Outputs {
		h := s.emptyVector()
		switch {
		case out.Shape.Scalar:
			h = s.scalar()
		case !out.Shape.Empty:
			h = handles[out.Shape.Like]
		}
		if err := s.setOutput(i, h); err != nil {
			return err
		}
	}
	return nil
}
