//go:build cuda

package cudatest

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>

typedef int cu_result;
typedef uint64_t cu_ptr;
typedef void* cu_ctx;
typedef void* cu_stream;

// The driver entry points this package uses, by their exported names (the
// _v2 ones are the 64-bit forms cuda.h maps the plain names to).
static struct {
  cu_result (*init)(unsigned);
  cu_result (*device_get_count)(int*);
  cu_result (*device_get)(int*, int);
  cu_result (*device_get_name)(char*, int, int);
  cu_result (*device_total_mem)(size_t*, int);
  cu_result (*driver_get_version)(int*);
  cu_result (*retain)(cu_ctx*, int);
  cu_result (*push)(cu_ctx);
  cu_result (*pop)(cu_ctx*);
  cu_result (*set_current)(cu_ctx);
  cu_result (*mem_alloc)(cu_ptr*, size_t);
  cu_result (*mem_free)(cu_ptr);
  cu_result (*htod)(cu_ptr, const void*, size_t);
  cu_result (*dtoh)(void*, cu_ptr, size_t);
  cu_result (*stream_create)(cu_stream*, unsigned);
  cu_result (*stream_destroy)(cu_stream);
  cu_result (*ctx_synchronize)(void);
  cu_result (*error_name)(cu_result, const char**);
} cu;

// cudatest_open loads the driver and resolves the entry points: 0, -1 when
// the library or an entry point is missing (*missing names it), or cuInit's
// error.
static int cudatest_open(const char** missing) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  *missing = "libcuda.so.1";
  if (lib == NULL) return -1;
#define SYM(field, name)                  \
  *missing = name;                        \
  *(void**)&cu.field = dlsym(lib, name);  \
  if (cu.field == NULL) return -1;
  SYM(init, "cuInit")
  SYM(device_get_count, "cuDeviceGetCount")
  SYM(device_get, "cuDeviceGet")
  SYM(device_get_name, "cuDeviceGetName")
  SYM(device_total_mem, "cuDeviceTotalMem_v2")
  SYM(driver_get_version, "cuDriverGetVersion")
  SYM(retain, "cuDevicePrimaryCtxRetain")
  SYM(push, "cuCtxPushCurrent_v2")
  SYM(pop, "cuCtxPopCurrent_v2")
  SYM(set_current, "cuCtxSetCurrent")
  SYM(mem_alloc, "cuMemAlloc_v2")
  SYM(mem_free, "cuMemFree_v2")
  SYM(htod, "cuMemcpyHtoD_v2")
  SYM(dtoh, "cuMemcpyDtoH_v2")
  SYM(stream_create, "cuStreamCreate")
  SYM(stream_destroy, "cuStreamDestroy_v2")
  SYM(ctx_synchronize, "cuCtxSynchronize")
  SYM(error_name, "cuGetErrorName")
#undef SYM
  *missing = NULL;
  return cu.init(0);
}

static int cudatest_device(int ordinal, cu_ctx* ctx, char* name, int name_len, size_t* mem, int* driver) {
  int n = 0, dev = 0;
  cu_result r = cu.device_get_count(&n);
  if (r != 0) return r;
  if (ordinal >= n) return 101;  // CUDA_ERROR_INVALID_DEVICE
  if ((r = cu.device_get(&dev, ordinal)) != 0) return r;
  if ((r = cu.device_get_name(name, name_len, dev)) != 0) return r;
  if ((r = cu.device_total_mem(mem, dev)) != 0) return r;
  if ((r = cu.driver_get_version(driver)) != 0) return r;
  return cu.retain(ctx, dev);
}

// Each call below runs in ctx, made current for the call alone: a
// goroutine may move between threads between calls.
enum { OP_ALLOC, OP_FREE, OP_HTOD, OP_DTOH, OP_STREAM, OP_STREAM_DESTROY, OP_SYNC };

static int cudatest_call(cu_ctx ctx, int op, cu_ptr* p, void* host, size_t bytes, uintptr_t* s) {
  cu_result r = cu.push(ctx), r2;
  cu_ctx popped;
  if (r != 0) return r;
  switch (op) {
    case OP_ALLOC: r = cu.mem_alloc(p, bytes); break;
    case OP_FREE: r = cu.mem_free(*p); break;
    case OP_HTOD:  // then wait: from pageable memory the copy may still be in flight
      r = cu.htod(*p, host, bytes);
      if (r == 0) r = cu.ctx_synchronize();
      break;
    case OP_DTOH: r = cu.dtoh(host, *p, bytes); break;
    case OP_STREAM: {  // CU_STREAM_NON_BLOCKING
      cu_stream created = NULL;
      r = cu.stream_create(&created, 1);
      *s = (uintptr_t)created;
      break;
    }
    case OP_STREAM_DESTROY: r = cu.stream_destroy((cu_stream)*s); break;
    case OP_SYNC: r = cu.ctx_synchronize(); break;
  }
  r2 = cu.pop(&popped);
  return r != 0 ? r : r2;
}

static int cudatest_set_current(cu_ctx ctx) { return cu.set_current(ctx); }

static const char* cudatest_error_name(int r) {
  const char* s = NULL;
  if (cu.error_name == NULL || cu.error_name(r, &s) != 0 || s == NULL) return "unknown CUDA error";
  return s;
}
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// Device is a GPU's primary context: the one TensorFlow, PyTorch and gobn's
// kernels run in.
type Device struct {
	ctx C.cu_ctx
	// Name is the GPU's name, MemoryBytes its memory, Driver the driver's
	// CUDA version (12040 for 12.4).
	Name        string
	MemoryBytes int64
	Driver      int
}

var openDriver = sync.OnceValue(func() error {
	var missing *C.char
	switch r := C.cudatest_open(&missing); {
	case r == -1:
		return fmt.Errorf("cudatest: no CUDA driver: %s not found", C.GoString(missing))
	case r != 0:
		return fmt.Errorf("cudatest: cuInit: %s", errorName(r))
	}
	return nil
})

func errorName(r C.int) string { return C.GoString(C.cudatest_error_name(r)) }

func check(what string, r C.int) error {
	if r != 0 {
		return fmt.Errorf("cudatest: %s: %s (%d)", what, errorName(r), int(r))
	}
	return nil
}

// Open retains the primary context of GPU ordinal; an error when there is
// no driver or no such GPU.
func Open(ordinal int) (*Device, error) {
	if err := openDriver(); err != nil {
		return nil, err
	}
	var (
		d      Device
		name   [256]C.char
		mem    C.size_t
		driver C.int
	)
	if err := check(fmt.Sprintf("device %d", ordinal),
		C.cudatest_device(C.int(ordinal), &d.ctx, &name[0], C.int(len(name)), &mem, &driver)); err != nil {
		return nil, err
	}
	d.Name, d.MemoryBytes, d.Driver = C.GoString(&name[0]), int64(mem), int(driver)
	return &d, nil
}

// MakeCurrent makes the primary context the calling thread's current one,
// as TensorFlow and PyTorch leave it on the threads that call gobn: lock
// the goroutine to its thread first (runtime.LockOSThread). The other
// methods work on any thread.
func (d *Device) MakeCurrent() error {
	return check("cuCtxSetCurrent", C.cudatest_set_current(d.ctx))
}

func (d *Device) call(what string, op C.int, p *C.cu_ptr, host unsafe.Pointer, bytes int, s *C.uintptr_t) error {
	return check(what, C.cudatest_call(d.ctx, op, p, host, C.size_t(bytes), s))
}

// Alloc returns bytes of device memory (cuMemAlloc: 256-byte aligned, its
// own allocation, so that compute-sanitizer sees any access past it).
func (d *Device) Alloc(bytes int) (uintptr, error) {
	var p C.cu_ptr
	err := d.call(fmt.Sprintf("cuMemAlloc(%d)", bytes), C.OP_ALLOC, &p, nil, max(bytes, 1), nil)
	return uintptr(p), err
}

// Free frees what Alloc returned.
func (d *Device) Free(p uintptr) error {
	q := C.cu_ptr(p)
	return d.call("cuMemFree", C.OP_FREE, &q, nil, 0, nil)
}

// Write copies src to device address dst, and returns when it is there (a
// copy from pageable memory may return while its DMA is still in flight,
// and a kernel on a non-blocking stream is not ordered after it).
func (d *Device) Write(dst uintptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	q := C.cu_ptr(dst)
	return d.call("cuMemcpyHtoD", C.OP_HTOD, &q, unsafe.Pointer(&src[0]), len(src), nil)
}

// Read copies len(dst) bytes from device address src to dst.
func (d *Device) Read(dst []byte, src uintptr) error {
	if len(dst) == 0 {
		return nil
	}
	q := C.cu_ptr(src)
	return d.call("cuMemcpyDtoH", C.OP_DTOH, &q, unsafe.Pointer(&dst[0]), len(dst), nil)
}

// NewStream creates a non-blocking stream (as TensorFlow's and PyTorch's
// are), returned as the CUstream handle.
func (d *Device) NewStream() (uintptr, error) {
	var s C.uintptr_t
	err := d.call("cuStreamCreate", C.OP_STREAM, nil, nil, 0, &s)
	return uintptr(s), err
}

// DestroyStream destroys a stream of NewStream.
func (d *Device) DestroyStream(s uintptr) error {
	cs := C.uintptr_t(s)
	return d.call("cuStreamDestroy", C.OP_STREAM_DESTROY, nil, nil, 0, &cs)
}

// Synchronize waits for all work in the context: an error a kernel left
// (an illegal address, say) surfaces here.
func (d *Device) Synchronize() error {
	return d.call("cuCtxSynchronize", C.OP_SYNC, nil, nil, 0, nil)
}
