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
// with scripts/cuda_fatbin.py).
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
	facts     gpuFacts
	barriers  struct {
		sync.Mutex
		byStream map[streamKey]Ptr
	}
	checked sync.Map // the streams that passed checkStream: Stream → struct{}
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

// barrierFor returns the persistent kernel's grid-barrier word for a launch
// on stream (barrierKey says whose), allocated and zeroed on the stream's
// first use and kept for the life of the process: a caller that makes a
// stream for each call leaves one word of device memory for each.
func (d *device) barrierFor(stream Stream) (Ptr, error) {
	key, err := barrierKey(stream, func() (streamState, error) {
		var id C.ulonglong
		var capturing C.int
		switch r := C.gobn_cuda_stream_state(&d.d, C.uintptr_t(stream), &id, &capturing); r {
		case 0:
			return streamState{id: uint64(id), known: true, capturing: capturing != 0}, nil
		case -1:
			return streamState{}, nil
		default:
			return streamState{}, fmt.Errorf("gobn: CUDA on device %d: querying the stream: %w", int(d.d.ordinal), cudaError(r))
		}
	})
	if err != nil {
		return 0, err
	}
	d.barriers.Lock()
	defer d.barriers.Unlock()
	if p, ok := d.barriers.byStream[key]; ok {
		return p, nil
	}
	var p C.gobn_ptr
	if r := C.gobn_cuda_alloc_zeroed(&d.d, barrierWords, &p); r != 0 {
		return 0, fmt.Errorf("%w: allocating the grid-barrier word: %w", errNoCooperative, cudaError(r))
	}
	if d.barriers.byStream == nil {
		d.barriers.byStream = make(map[streamKey]Ptr)
	}
	d.barriers.byStream[key] = Ptr(p)
	return Ptr(p), nil
}

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
	d := &device{functions: make([]C.gobn_cu_function, len(kernelNames))}
	if r := C.gobn_cuda_device_open(C.int(ordinal), fatbinC(), &d.d); r != 0 {
		return nil, fmt.Errorf("gobn: loading the GPU kernels on device %d: %w", ordinal, cudaError(r))
	}
	d.facts = gpuFacts{
		sms: int64(d.d.sms), cooperative: d.d.cooperative != 0,
		resident: make([]int64, len(kernelNames)),
	}
	for i, name := range kernelNames {
		cname := C.CString(name)
		var resident C.int
		r := C.gobn_cuda_function(&d.d, cname, threads, &d.functions[i], &resident)
		C.free(unsafe.Pointer(cname))
		if r != 0 {
			return nil, fmt.Errorf("gobn: kernel %s on device %d: %w", name, ordinal, cudaError(r))
		}
		d.facts.resident[i] = int64(resident)
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

// factsOf returns the facts of the device that holds address anchor, with
// the persistent kernel's switch, or none (which plans the three-launch path) when it cannot
// be told; the call then fails in execute, saying why.
func factsOf(anchor Ptr) gpuFacts {
	if anchor == 0 {
		return gpuFacts{}
	}
	d, err := deviceAt(anchor)
	if err != nil {
		return gpuFacts{}
	}
	f := d.facts
	f.persistent = Persistent()
	return f
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
		if l.cooperative {
			if l.params.barrier, err = d.barrierFor(pl.Stream); err != nil {
				return err
			}
		}
		ls[i] = C.gobn_launch{
			fn:     d.functions[l.kernel],
			grid:   [3]C.uint{C.uint(l.grid[0]), C.uint(l.grid[1]), C.uint(l.grid[2])},
			block:  [3]C.uint{C.uint(l.block[0]), C.uint(l.block[1]), C.uint(l.block[2])},
			params: cParams(l.params),
		}
		if l.cooperative {
			ls[i].cooperative = 1
		}
	}
	var failed C.int
	r := C.gobn_cuda_run(&d.d, C.uintptr_t(pl.Stream), &ls[0], C.int(len(ls)), &failed)
	for _, l := range p.launches[:launched(int(failed), r, len(ls))] {
		launches[l.kernel].Add(1)
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
			what = "launching " + kernelNames[p.launches[failed].kernel]
		}
		err := fmt.Errorf("gobn: CUDA on device %d: %s: %w", int(ordinal), what, cudaError(r))
		if failed >= 0 && int(failed) < len(ls) && p.launches[failed].cooperative &&
			(r == errCooperativeLaunchTooLarge || r == errNotSupported) {
			return fmt.Errorf("%w: %w", errNoCooperative, err)
		}
		return err
	}
	return nil
}

// The CUDA errors with which a device refuses a cooperative launch (cuda.h):
// CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE (it holds fewer blocks now than
// the occupancy query said, e.g. under MPS) and CUDA_ERROR_NOT_SUPPORTED.
const (
	errCooperativeLaunchTooLarge = 720
	errNotSupported              = 801
)

// launched returns how many launches were made.
func launched(failed int, r C.int, n int) int {
	if r == 0 || failed >= n {
		return n
	}
	return max(failed, 0)
}

func cParams(p params) C.gobn_params {
	var out [5]C.gobn_ptr
	for i, o := range p.out {
		out[i] = C.gobn_ptr(o)
	}
	return C.gobn_params{
		dy: C.gobn_ptr(p.dy), x: C.gobn_ptr(p.x), dx: C.gobn_ptr(p.dx),
		mean: C.gobn_ptr(p.mean), scale: C.gobn_ptr(p.scale), _var: C.gobn_ptr(p.variance),
		sum_dy: C.gobn_ptr(p.sumDy), sum_dy_xmu: C.gobn_ptr(p.sumDyXmu),
		partial: C.gobn_ptr(p.partial), coef: C.gobn_ptr(p.coef), barrier: C.gobn_ptr(p.barrier), out: out,
		n: C.longlong(p.n), c: C.longlong(p.c), s: C.longlong(p.s), count: C.longlong(p.count),
		splits: C.int(p.splits), tasks: C.int(p.tasks), tiles: C.int(p.tiles), epsilon: C.float(p.epsilon),
		scale_after_normalization: C.int(p.scaleAfterNormalization),
	}
}
