package main

// #include "gobn.h"
import "C"

import (
	"fmt"
	"runtime/cgo"

	"github.com/gobn/gobn/opdef"
)

// TensorFlow's and XLA's callbacks: the exported functions the C trampolines
// of register.c, xla.c and registry_gen.c call. Each looks up its kernel,
// calls the Go that does the work (kernel.go and the families, shapes.go, xla.go) and
// recovers from panics: a bug in gobn becomes an Internal error, never a
// crash of the host process.

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
	k, err := newKernel(int(op), int(flags), constructionAttrs{ctx: ctx, status: status})
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
	if err := cgo.Handle(handle).Value().(*kernel).call(c); err != nil {
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

// gobnXLACall is an XLA FFI handler's execute stage (xla.c's gobn_xla_call
// answers the rest), for op number op on the platform flags says
// (GOBN_ON_GPU: CUDA). It returns nil or the error XLA reports.
//
//export gobnXLACall
func gobnXLACall(frame *C.gobn_xla_frame, op, flags C.int) (failure *C.gobn_xla_error) {
	defer func() {
		if p := recover(); p != nil {
			failure = xlaError(internalError(fmt.Sprintf("gobn: panic in XLA handler: %v", p)))
		}
	}()
	return xlaError(xlaCall(frame, int(op), flags&gobnOnGPU != 0))
}
