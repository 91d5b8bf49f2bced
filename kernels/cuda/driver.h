// The CUDA driver API as gobn uses it, opened at run time: libgobn.so links
// no CUDA library, and loads and runs its CPU kernels on a machine without
// a GPU or driver.
#ifndef GOBN_KERNELS_CUDA_DRIVER_H_
#define GOBN_KERNELS_CUDA_DRIVER_H_

#include <stdint.h>

#include "params_gen.h"

// The driver's handle types, declared as cuda.h declares them.
typedef int gobn_cu_result;
typedef struct CUctx_st* gobn_cu_context;
typedef struct CUmod_st* gobn_cu_module;
typedef struct CUfunc_st* gobn_cu_function;
typedef struct CUstream_st* gobn_cu_stream;

// One device as gobn uses it: its primary context (the one TensorFlow and
// PyTorch run on), gobn's module in it, and gobn's own non-blocking stream.
typedef struct {
  int ordinal;
  gobn_cu_context ctx;
  gobn_cu_module module;
  gobn_cu_stream stream;
} gobn_device;

// One kernel launch: grid and block shape and the kernel's one argument.
typedef struct {
  gobn_cu_function fn;
  unsigned int grid[3];
  unsigned int block[3];
  gobn_params params;
} gobn_launch;

// gobn_cuda_open loads libcuda.so.1, resolves the entry points through
// cuGetProcAddress and calls cuInit. It returns 0, a CUDA error code, or -1
// with a message in err when the library or an entry point is missing.
int gobn_cuda_open(char* err, int err_len);

// gobn_cuda_device_of sets *ordinal to the device that holds address p.
int gobn_cuda_device_of(uint64_t p, int* ordinal);

// gobn_cuda_device_open retains the device's primary context, and loads
// image (a fatbin) and creates gobn's stream in it.
int gobn_cuda_device_open(int ordinal, const void* image, gobn_device* d);

// gobn_cuda_function looks up a kernel of the device's module by name.
int gobn_cuda_function(const gobn_device* d, const char* name, gobn_cu_function* fn);

// gobn_cuda_stream_check sets *flags to the creation flags of stream (a
// CUstream), and returns 0 when the stream belongs to the device's primary
// context, -2 when it belongs to another context, or the CUDA error of the
// query.
int gobn_cuda_stream_check(const gobn_device* d, uintptr_t stream, unsigned int* flags);

// gobn_cuda_run makes the device's primary context current (unless it is),
// and launches the n launches in order. With caller_stream 0 it first
// synchronizes the context (TensorFlow's streams are non-blocking, so this
// is how gobn's work follows theirs), launches on gobn's own stream and
// waits for it. With a stream (a CUstream) it only enqueues on it. It restores the
// thread's context, and returns 0 or the first error with *failed the index
// of the launch that failed (-1 for the context or the synchronization
// before them, n for the synchronization after them).
int gobn_cuda_run(const gobn_device* d, uintptr_t caller_stream, const gobn_launch* launches, int n, int* failed);

// gobn_cuda_error_name and gobn_cuda_error_string describe a CUDA error.
const char* gobn_cuda_error_name(int r);
const char* gobn_cuda_error_string(int r);

#endif  // GOBN_KERNELS_CUDA_DRIVER_H_
