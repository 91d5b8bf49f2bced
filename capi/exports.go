package main

// #include "gobn.h"
import "C"

import (
	"encoding/json"
	"fmt"
	"sync/atomic"

	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/opdef"
)

// The library's exports for the Python package (gobn/__init__.py, through
// ctypes): what ran, how the CPU kernels split their work, and enable().
// Each returns a C string the caller frees (libc free), or NULL on failure,
// and recovers from panics.

// The flags a kernel is registered with (gobn.h).
const (
	gobnOnGPU   = C.GOBN_ON_GPU
	gobnAsStock = C.GOBN_AS_STOCK
)

// kernelCalls counts the compute calls of each op's kernels, by the flags
// they were registered with.
var kernelCalls = make([][4]atomic.Uint64, len(opdef.All))

// jsonString returns v as a JSON C string, or nil.
func jsonString(v any) *C.char {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return C.CString(string(b))
}

// gobnKernelCalls returns the compute calls of gobn's kernels since the
// library was loaded, as JSON: {"registered op name": {"CPU": n, "GPU": n}}
// for every kernel called at least once (the stock names are those of
// gobnEnable's kernels), with "XLA_CPU" and "XLA_GPU" for the calls of the
// op's XLA handlers (xla.go). It is how a caller can tell that gobn's
// kernels, not stock's or XLA's own, ran.
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
			name, device := op.Name, deviceName(flags&gobnOnGPU != 0)
			if flags&gobnAsStock != 0 {
				name = op.Stock
			}
			if calls[name] == nil {
				calls[name] = map[string]uint64{}
			}
			calls[name][device] = n
		}
		for device, n := range [2]uint64{xlaCalls[i][0].Load(), xlaCalls[i][1].Load()} {
			if n == 0 {
				continue
			}
			if calls[op.Name] == nil {
				calls[op.Name] = map[string]uint64{}
			}
			calls[op.Name]["XLA_"+deviceName(device == 1)] = n
		}
	}
	return jsonString(calls)
}

// gobnXLAStatus returns, as JSON, what the library registered with XLA's
// FFI when it loaded (xla.c): {"api_version": "0.2" or null, "library":
// the TensorFlow library the API came from, "handlers": {"host": n,
// "cuda": n}, "reason": why none or not every one was registered, or ""}.
//
//export gobnXLAStatus
func gobnXLAStatus() (s *C.char) {
	defer func() {
		if recover() != nil {
			s = nil
		}
	}()
	var info C.gobn_xla_status_info
	C.gobn_xla_status(&info)
	var version any
	if info.major >= 0 {
		version = fmt.Sprintf("%d.%d", int(info.major), int(info.minor))
	}
	return jsonString(map[string]any{
		"api_version": version, "library": C.GoString(info.library), "reason": C.GoString(info.reason),
		"handlers": map[string]int{"host": int(info.host_handlers), "cuda": int(info.cuda_handlers)},
	})
}

// gobnSplitStats returns kernels.SplitStats and kernels.SplitShares as
// JSON, {"calls": n, "max_ranges": n, "max_workers": n, "ranges": n,
// "helper_ranges": n, "wait_us": x}: how the CPU kernels have split their
// work since the library was loaded, for the tests that mean to exercise
// the parallel split, and for benchmarks to read how much of it helpers
// did. calls counts every call cut into ranges; ranges, helper_ranges and
// wait_us only those that had helpers (pinned threads or goroutines).
//
//export gobnSplitStats
func gobnSplitStats() (s *C.char) {
	defer func() {
		if recover() != nil {
			s = nil
		}
	}()
	calls, ranges, workers := kernels.SplitStats()
	run, helped, wait := kernels.SplitShares()
	return jsonString(map[string]any{"calls": calls, "max_ranges": ranges, "max_workers": workers,
		"ranges": run, "helper_ranges": helped, "wait_us": float64(wait.Nanoseconds()) / 1e3})
}

// gobnStreamStats returns, as JSON, how GPU calls have run since the
// library was loaded (stream.go): {"enabled", "resolved", "on_stream",
// "fallbacks", "first_fallback", "synchronized_calls", "enqueued_calls"}.
//
//export gobnStreamStats
func gobnStreamStats() (s *C.char) {
	defer func() {
		if recover() != nil {
			s = nil
		}
	}()
	return jsonString(tfStream.stats())
}

// gobnSetTFStream switches the use of TensorFlow's stream for the GPU calls
// that follow on (1) or off (0: the synchronizing rule, not counted as a
// fallback), and returns the previous setting: for benchmarks that time
// both in one process.
//
//export gobnSetTFStream
func gobnSetTFStream(on C.int) C.int {
	if tfStream.on.Swap(on != 0) {
		return 1
	}
	return 0
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
