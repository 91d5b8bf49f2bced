//go:build cuda

#include "driver.h"

#include <dlfcn.h>
#include <stdio.h>

// Values from cuda.h.
enum {
  kStreamNonBlocking = 0x1,             // CU_STREAM_NON_BLOCKING
  kPointerAttributeDeviceOrdinal = 9,   // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
  kErrorInvalidContext = 201,           // CUDA_ERROR_INVALID_CONTEXT
  kProcAddressVersion = 11030,          // the ABI gobn asks for: CUDA 11.3's
};

typedef gobn_cu_result (*get_proc_address_fn)(const char*, void**, int, uint64_t);

static struct {
  gobn_cu_result (*init)(unsigned int);
  gobn_cu_result (*device_get)(int*, int);
  gobn_cu_result (*primary_ctx_retain)(gobn_cu_context*, int);
  gobn_cu_result (*ctx_get_current)(gobn_cu_context*);
  gobn_cu_result (*ctx_push_current)(gobn_cu_context);
  gobn_cu_result (*ctx_pop_current)(gobn_cu_context*);
  gobn_cu_result (*ctx_synchronize)(void);
  gobn_cu_result (*module_load_data)(gobn_cu_module*, const void*);
  gobn_cu_result (*module_get_function)(gobn_cu_function*, gobn_cu_module, const char*);
  gobn_cu_result (*launch_kernel)(gobn_cu_function, unsigned int, unsigned int, unsigned int, unsigned int,
                                  unsigned int, unsigned int, unsigned int, gobn_cu_stream, void**, void**);
  gobn_cu_result (*stream_create)(gobn_cu_stream*, unsigned int);
  gobn_cu_result (*stream_synchronize)(gobn_cu_stream);
  gobn_cu_result (*stream_get_ctx)(gobn_cu_stream, gobn_cu_context*);
  gobn_cu_result (*stream_get_flags)(gobn_cu_stream, unsigned int*);
  gobn_cu_result (*pointer_get_attribute)(void*, int, uint64_t);
  gobn_cu_result (*get_error_name)(gobn_cu_result, const char**);
  gobn_cu_result (*get_error_string)(gobn_cu_result, const char**);
} cu;

int gobn_cuda_open(char* err, int err_len) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    const char* why = dlerror();
    snprintf(err, err_len, "the CUDA driver library libcuda.so.1 could not be loaded (%s)",
             why != NULL ? why : "no reason given");
    return -1;
  }
  get_proc_address_fn get = (get_proc_address_fn)dlsym(lib, "cuGetProcAddress");
  if (get == NULL) {
    snprintf(err, err_len, "libcuda.so.1 has no cuGetProcAddress: the driver is older than CUDA 11.3");
    return -1;
  }
  struct {
    const char* name;
    void** fn;
  } entries[] = {
      {"cuInit", (void**)&cu.init},
      {"cuDeviceGet", (void**)&cu.device_get},
      {"cuDevicePrimaryCtxRetain", (void**)&cu.primary_ctx_retain},
      {"cuCtxGetCurrent", (void**)&cu.ctx_get_current},
      {"cuCtxPushCurrent", (void**)&cu.ctx_push_current},
      {"cuCtxPopCurrent", (void**)&cu.ctx_pop_current},
      {"cuCtxSynchronize", (void**)&cu.ctx_synchronize},
      {"cuModuleLoadData", (void**)&cu.module_load_data},
      {"cuModuleGetFunction", (void**)&cu.module_get_function},
      {"cuLaunchKernel", (void**)&cu.launch_kernel},
      {"cuStreamCreate", (void**)&cu.stream_create},
      {"cuStreamSynchronize", (void**)&cu.stream_synchronize},
      {"cuStreamGetCtx", (void**)&cu.stream_get_ctx},
      {"cuStreamGetFlags", (void**)&cu.stream_get_flags},
      {"cuPointerGetAttribute", (void**)&cu.pointer_get_attribute},
      {"cuGetErrorName", (void**)&cu.get_error_name},
      {"cuGetErrorString", (void**)&cu.get_error_string},
  };
  for (unsigned i = 0; i < sizeof entries / sizeof entries[0]; i++) {
    int r = get(entries[i].name, entries[i].fn, kProcAddressVersion, 0);
    if (r != 0 || *entries[i].fn == NULL) {
      snprintf(err, err_len, "libcuda.so.1 does not provide %s (error %d)", entries[i].name, r);
      return -1;
    }
  }
  return cu.init(0);
}

int gobn_cuda_device_of(uint64_t p, int* ordinal) {
  return cu.pointer_get_attribute(ordinal, kPointerAttributeDeviceOrdinal, p);
}

int gobn_cuda_device_open(int ordinal, const void* image, gobn_device* d) {
  int dev;
  int r = cu.device_get(&dev, ordinal);
  if (r != 0) return r;
  d->ordinal = ordinal;
  r = cu.primary_ctx_retain(&d->ctx, dev);  // kept for the life of the process
  if (r != 0) return r;
  r = cu.ctx_push_current(d->ctx);
  if (r != 0) return r;
  r = cu.module_load_data(&d->module, image);
  if (r == 0) r = cu.stream_create(&d->stream, kStreamNonBlocking);
  gobn_cu_context popped;
  cu.ctx_pop_current(&popped);
  return r;
}

int gobn_cuda_function(const gobn_device* d, const char* name, gobn_cu_function* fn) {
  return cu.module_get_function(fn, d->module, name);
}

int gobn_cuda_stream_check(const gobn_device* d, uintptr_t stream, unsigned int* flags) {
  gobn_cu_context ctx = NULL;
  int r = cu.stream_get_ctx((gobn_cu_stream)stream, &ctx);
  if (r == 0) r = cu.stream_get_flags((gobn_cu_stream)stream, flags);
  if (r != 0) return r;
  return ctx == d->ctx ? 0 : -2;
}

int gobn_cuda_run(const gobn_device* d, uintptr_t caller_stream, const gobn_launch* launches, int n, int* failed) {
  *failed = -1;
  gobn_cu_context current = NULL;
  int r = cu.ctx_get_current(&current);
  if (r != 0) return r;
  int pushed = current != d->ctx;
  if (pushed) {
    r = cu.ctx_push_current(d->ctx);
    if (r != 0) return r;
  }
  gobn_cu_stream stream = (gobn_cu_stream)caller_stream;
  int own = stream == NULL;
  if (own) {
    stream = d->stream;
    r = cu.ctx_synchronize();
  }
  for (int i = 0; r == 0 && i < n; i++) {
    const gobn_launch* l = &launches[i];
    void* args[] = {(void*)&l->params};
    r = cu.launch_kernel(l->fn, l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1], l->block[2], 0,
                         stream, args, NULL);
    if (r != 0) *failed = i;
  }
  if (own && r == 0) {
    r = cu.stream_synchronize(stream);
    if (r != 0) *failed = n;
  }
  if (pushed) {
    gobn_cu_context popped;
    cu.ctx_pop_current(&popped);
  }
  return r;
}

const char* gobn_cuda_error_name(int r) {
  const char* s = NULL;
  if (cu.get_error_name == NULL || cu.get_error_name(r, &s) != 0 || s == NULL) return "CUDA_ERROR_UNKNOWN";
  return s;
}

const char* gobn_cuda_error_string(int r) {
  const char* s = NULL;
  if (cu.get_error_string == NULL || cu.get_error_string(r, &s) != 0 || s == NULL) return "unrecognized error code";
  return s;
}
