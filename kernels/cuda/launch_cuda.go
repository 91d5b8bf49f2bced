//go:build cuda

package cuda

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "driver.h"
*/
import "C"

import (
	_ "embed"
	"fmt"
	"sync"
	"unsafe"
)

// Built reports whether the library carries the CUDA path.
const Built = true

// fatbin is the device code of batchnorm.cu for every architecture
// TensorFlow's GPU build targets, with PTX for the newest (make builds it
// with tools/cuda_fatbin.py).
//
//go:embed gobn.fatbin
var fatbin []byte

// fatbinC is fatbin in C memory, where the driver may keep reading it.
var fatbinC = sync.OnceValue(func() unsafe.Pointer { return C.CBytes(fatbin) })

// openDriver loads the driver once; its error stays the answer.
var openDriver = sync.OnceValue(func() error {
	var msg [512]C.char
	r := C.gobn_cuda_open(&msg[0], C.int(len(msg)))
	switch {
	case r == -1:
		return fmt.Errorf("gobn: no GPU can be used: %s", C.GoString(&msg[0]))
	case r != 0:
		return fmt.Errorf("gobn: no GPU can be used: cuInit: %w", cudaError(r))
	}
	return nil
})

// Available returns nil when the driver loads and initializes, or the
// reason a GPU kernel cannot run.
func Available() error { return openDriver() }

// cudaError describes a CUDA driver error code.
func cudaError(r C.int) error {
	return fmt.Errorf("%s: %s", C.GoString(C.gobn_cuda_error_name(r)), C.GoString(C.gobn_cuda_error_string(r)))
}

// device is a GPU with gobn's module loaded and its kernels looked up.
type device struct {
	d         C.gobn_device
	functions []C.gobn_cu_function // by kernelID
	checked   sync.Map             // the streams that passed checkStream: Stream → struct{}
}

// checkStream checks stream for a Placement with CheckStream, once per
// stream: TensorFlow keeps its streams for the life of the device.
func (d *device) checkStream(stream Stream) error {
	if _, ok := d.checked.Load(stream); ok {
		return nil
	}
	var flags C.uint
	r := C.gobn_cuda_stream_check(&d.d, C.uintptr_t(stream), &flags)
	if err := streamVerdict(int(d.d.ordinal), int(r), uint(flags), func(r int) error { return cudaError(C.int(r)) }); err != nil {
		return err
	}
	d.checked.Store(stream, struct{}{})
	return nil
}

// gobn_params is params laid out alike: params_gen.h asserts each field's
// offset in cgo's C compiler and in NVRTC, and this its size in Go's, so a
// launch hands the kernels the Go struct's bytes as they are.
var _ = [1]struct{}{}[unsafe.Sizeof(C.gobn_params{})-unsafe.Sizeof(params{})]

var devices struct {
	sync.Mutex
	byOrdinal map[int]*device
}

// deviceFor returns the device at ordinal, opening it on first use.
func deviceFor(ordinal int) (*device, error) {
	devices.Lock()
	defer devices.Unlock()
	if d, ok := devices.byOrdinal[ordinal]; ok {
		return d, nil
	}
	d := &device{functions: make([]C.gobn_cu_function, len(kernelNames()))}
	if r := C.gobn_cuda_device_open(C.int(ordinal), fatbinC(), &d.d); r != 0 {
		return nil, fmt.Errorf("gobn: loading the GPU kernels on device %d: %w", ordinal, cudaError(r))
	}
	for i, name := range kernelNames() {
		cname := C.CString(name)
		r := C.gobn_cuda_function(&d.d, cname, &d.functions[i])
		C.free(unsafe.Pointer(cname))
		if r != 0 {
			return nil, fmt.Errorf("gobn: kernel %s on device %d: %w", name, ordinal, cudaError(r))
		}
	}
	if devices.byOrdinal == nil {
		devices.byOrdinal = make(map[int]*device)
	}
	devices.byOrdinal[ordinal] = d
	return d, nil
}

// deviceAt returns the device that holds address anchor.
func deviceAt(anchor Ptr) (*device, error) {
	if err := openDriver(); err != nil {
		return nil, err
	}
	var ordinal C.int
	if r := C.gobn_cuda_device_of(C.uint64_t(anchor), &ordinal); r != 0 {
		return nil, fmt.Errorf("gobn: address %#x is not device memory CUDA knows: %w", anchor, cudaError(r))
	}
	return deviceFor(int(ordinal))
}

// execute runs the plan on the device that holds address anchor.
func execute(p plan, pl Placement, anchor Ptr) error {
	if len(p.launches) == 0 {
		return nil
	}
	if p.workspace > 0 && (pl.Workspace == 0 || pl.WorkspaceBytes < p.workspace) {
		return fmt.Errorf("gobn: the call needs %d bytes of workspace, got %d at %#x", p.workspace, pl.WorkspaceBytes, pl.Workspace)
	}
	p.bind(pl.Workspace)
	d, err := deviceAt(anchor)
	if err != nil {
		return err
	}
	ordinal := d.d.ordinal
	if pl.Stream != 0 && pl.CheckStream {
		if err := d.checkStream(pl.Stream); err != nil {
			return err
		}
	}
	ls := make([]C.gobn_launch, len(p.launches))
	for i, l := range p.launches {
		ls[i] = C.gobn_launch{
			fn:     d.functions[l.kernel],
			grid:   [3]C.uint{C.uint(l.grid[0]), C.uint(l.grid[1]), C.uint(l.grid[2])},
			block:  [3]C.uint{C.uint(l.block[0]), C.uint(l.block[1]), C.uint(l.block[2])},
			params: *(*C.gobn_params)(unsafe.Pointer(&l.params)),
		}
	}
	var failed C.int
	r := C.gobn_cuda_run(&d.d, C.uintptr_t(pl.Stream), &ls[0], C.int(len(ls)), &failed)
	for _, l := range p.launches[:launched(int(failed), r, len(ls))] {
		launches()[l.kernel].Add(1)
	}
	if pl.Stream == 0 {
		synchronized.Add(1)
	} else {
		enqueued.Add(1)
	}
	if r != 0 {
		what := "synchronizing the device before the launches"
		switch {
		case int(failed) == len(ls):
			what = "waiting for the kernels"
		case failed >= 0:
			what = "launching " + kernelNames()[p.launches[failed].kernel]
		}
		return fmt.Errorf("gobn: CUDA on device %d: %s: %w", int(ordinal), what, cudaError(r))
	}
	return nil
}

// launched returns how many launches were made.
func launched(failed int, r C.int, n int) int {
	if r == 0 || failed >= n {
		return n
	}
	return max(failed, 0)
}
