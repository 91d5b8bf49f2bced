package main

// #include <stdlib.h>
// #include "gobn.h"
import "C"

import (
	"errors"
	"unsafe"

	"github.com/gobn/gobn/opdef"
)

// tfError is an error that carries a TensorFlow status code.
type tfError struct {
	code C.TF_Code
	msg  string
}

func (e *tfError) Error() string { return e.msg }

// internalError wraps a recovered panic: TensorFlow sees TF_INTERNAL.
func internalError(msg string) error { return &tfError{code: C.TF_INTERNAL, msg: msg} }

// statusError returns the error status holds, or nil when it is TF_OK.
func statusError(status *C.TF_Status) error {
	code := C.TF_GetCode(status)
	if code == C.TF_OK {
		return nil
	}
	return &tfError{code: code, msg: C.GoString(C.TF_Message(status))}
}

// setStatus writes err into status: InvalidArgument for broken op rules, the
// carried code for TensorFlow's own errors, Internal for anything else.
func setStatus(status *C.TF_Status, err error) {
	msg := C.CString(err.Error())
	defer C.free(unsafe.Pointer(msg))
	C.TF_SetStatus(status, statusCode(err), msg)
}

// statusCode returns the TensorFlow status code err is reported with.
func statusCode(err error) C.TF_Code {
	var argErr *opdef.ArgumentError
	var tfErr *tfError
	switch {
	case errors.As(err, &argErr):
		return C.TF_INVALID_ARGUMENT
	case errors.As(err, &tfErr):
		return tfErr.code
	}
	return C.TF_INTERNAL
}

// xlaError returns err as the error an XLA FFI handler returns: nil for
// nil, XLA's own error as XLA gave it, else a new one with err's code
// (TF_Code and XLA's codes are both absl's) and message.
func xlaError(err error) *C.gobn_xla_error {
	if err == nil {
		return nil
	}
	var failure xlaFailure
	if errors.As(err, &failure) {
		return failure.err
	}
	msg := C.CString(err.Error())
	defer C.free(unsafe.Pointer(msg))
	return C.gobn_xla_error_new(C.int(statusCode(err)), msg)
}

// isInternal reports whether err is reported as TensorFlow's Internal: a
// bug of gobn's, or a broken promise of TensorFlow's.
func isInternal(err error) bool { return statusCode(err) == C.TF_INTERNAL }
