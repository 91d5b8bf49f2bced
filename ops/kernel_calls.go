package ops

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

// The copy of libgobn.so this process has loaded, found by its soname (the
// library is linked with it) without loading anything, or NULL.
static void* gobn_loaded(void) { return dlopen("libgobn.so", RTLD_LAZY | RTLD_NOLOAD); }

// The library's JSON export name of handle: a string the caller frees, or
// NULL with *found set to 0 when the library has no such export.
static char* gobn_call_export(void* handle, const char* name, int* found) {
	char* (*fn)(void) = (char* (*)(void))dlsym(handle, name);
	*found = fn != NULL;
	return fn != NULL ? fn() : NULL;
}
*/
import "C"

import (
	"encoding/json"
	"errors"
	"fmt"
	"unsafe"
)

// KernelCalls returns the compute calls of gobn's kernels since the library
// was loaded, read from the copy of libgobn.so that TensorFlow loaded (Load):
// {registered op name: {device: calls}} for every kernel that ran, e.g.
// {"Gobn>FusedBatchNormGradV3": {"CPU": 5}}. The devices are "CPU" and
// "GPU", and "XLA_CPU" and "XLA_GPU" for calls inside XLA-compiled
// functions. It is how a program tells that gobn's kernels, not stock's,
// computed its gradients, as gobn.kernel_calls() does in Python.
func KernelCalls() (map[string]map[string]int64, error) {
	var calls map[string]map[string]int64
	if err := readExport("gobnKernelCalls", &calls); err != nil {
		return nil, fmt.Errorf("gobn: KernelCalls: %w", err)
	}
	return calls, nil
}

// readExport decodes into v the JSON that the loaded library's export
// returns.
func readExport(export string, v any) error {
	handle := C.gobn_loaded()
	if handle == nil {
		return errors.New("no libgobn.so is loaded in this process (call Load first)")
	}
	defer C.dlclose(handle)
	name := C.CString(export)
	defer C.free(unsafe.Pointer(name))
	var found C.int
	s := C.gobn_call_export(handle, name, &found)
	if found == 0 {
		return fmt.Errorf("the loaded libgobn.so has no %s: not gobn's library, or a build older than this package", export)
	}
	if s == nil {
		return fmt.Errorf("the library's %s failed", export)
	}
	defer C.free(unsafe.Pointer(s))
	if err := json.Unmarshal([]byte(C.GoString(s)), v); err != nil {
		return fmt.Errorf("reading %s: %w", export, err)
	}
	return nil
}
