// TensorFlow's compute stream for a running GPU kernel.
//
// TensorFlow's C API gives no stream for its own CUDA device (TF_GetStream
// answers only for pluggable devices), but its framework library exports
// tensorflow::OpKernelContext::eigen_device<Eigen::GpuDevice>() const, and a
// TF_OpKernelContext* is an OpKernelContext* (tensorflow/c/kernels.cc casts
// it). With the Itanium C++ ABI of TensorFlow's Linux wheels:
//
//   - the member function takes `this` as its one argument and returns the
//     address of the op's Eigen::GpuDevice (a reference);
//   - the first member of Eigen::GpuDevice is `const Eigen::StreamInterface*
//     stream_` (unsupported/Eigen/CXX11/src/Tensor/TensorDeviceGpu.h);
//   - StreamInterface's virtual table holds its two destructors, then
//     `const gpuStream_t& stream() const`: slot 2, which returns the address
//     of the CUstream TensorFlow set for this op (BaseGPUDevice fills it in
//     for every kernel on a GPU device, C-API kernels included).
//
// The function is resolved by name, never linked, so that a TensorFlow
// without it still loads gobn; its own body reads the context's layout
// (which differs between releases), gobn reads only Eigen's. On a CPU device
// it would dereference a null pointer: GPU kernels only. What it returns is
// checked by the caller before it is trusted (kernels/cuda: the stream's
// context and flags).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

#include "gobn.h"

// The mangled name of tensorflow::OpKernelContext::eigen_device<Eigen::GpuDevice>() const.
static const char kEigenGpuDevice[] = "_ZNK10tensorflow15OpKernelContext12eigen_deviceIN5Eigen9GpuDeviceEEERKT_v";

typedef const void* (*eigen_device_fn)(const TF_OpKernelContext* ctx);
typedef const void* const* (*stream_fn)(const void* stream_interface);

static eigen_device_fn eigen_gpu_device;
static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;

// resolve looks the function up in the framework library gobn's kernel API
// comes from (loaded before gobn: the loader resolved TF_GetInput there), and
// in the process's global scope where that library cannot be opened by name.
static void resolve(void) {
  void* lib = NULL;
  Dl_info info;
  if (dladdr((void*)&TF_GetInput, &info) != 0 && info.dli_fname != NULL) {
    lib = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  }
  if (lib == NULL) lib = dlopen("libtensorflow_framework.so.2", RTLD_NOW | RTLD_NOLOAD);
  void* fn = dlsym(lib != NULL ? lib : RTLD_DEFAULT, kEigenGpuDevice);
  if (fn == NULL && lib != NULL) fn = dlsym(RTLD_DEFAULT, kEigenGpuDevice);
  eigen_gpu_device = (eigen_device_fn)fn;
  // The handle is kept: the library stays loaded as long as TensorFlow does.
}

int gobn_tf_stream(TF_OpKernelContext* ctx, uintptr_t* stream) {
  *stream = 0;
  pthread_once(&resolve_once, resolve);
  if (eigen_gpu_device == NULL) return GOBN_STREAM_NO_SYMBOL;
  const void* device = eigen_gpu_device(ctx);
  if (device == NULL) return GOBN_STREAM_NO_DEVICE;
  const void* iface = *(const void* const*)device;
  if (iface == NULL) return GOBN_STREAM_NO_DEVICE;
  const stream_fn* vtable = *(const stream_fn* const*)iface;
  if (vtable == NULL || vtable[2] == NULL) return GOBN_STREAM_NO_DEVICE;
  const void* const* s = vtable[2](iface);
  if (s == NULL || *s == NULL) return GOBN_STREAM_NO_STREAM;
  *stream = (uintptr_t)*s;
  return GOBN_STREAM_OK;
}
