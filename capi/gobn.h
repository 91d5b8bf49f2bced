// Declarations shared by gobn's C registration code and its Go callbacks.
#ifndef GOBN_CAPI_GOBN_H_
#define GOBN_CAPI_GOBN_H_

#include <stdint.h>

// ops.h declares its handle types as bare structs (C++ style); C needs the
// typedefs before it is included.
typedef struct TF_DimensionHandle TF_DimensionHandle;
typedef struct TF_OpDefinitionBuilder TF_OpDefinitionBuilder;
typedef struct TF_ShapeHandle TF_ShapeHandle;
typedef struct TF_ShapeInferenceContext TF_ShapeInferenceContext;

// kernels.h defines the constant TF_InputRange_Args_STRUCT_SIZE in the
// header; in C (unlike C++) that is an external definition in every file that
// includes it, and the link fails. Make those definitions weak.
#define TF_InputRange_Args_STRUCT_SIZE __attribute__((weak)) TF_InputRange_Args_STRUCT_SIZE
#include "tensorflow/c/kernels.h"
#undef TF_InputRange_Args_STRUCT_SIZE
#include "tensorflow/c/ops.h"
#include "tensorflow/c/tf_status.h"
#include "tensorflow/c/tf_tensor.h"
#include "xla.h"

// One dtype binding of a kernel: the TF_DataType of attr T, and of attr U or -1.
typedef struct {
  int t;
  int u;
} gobn_binding;

// One op as generated from opdef: spec strings and the per-op trampolines.
typedef struct {
  const char* name;
  const char* stock;  // the stock op of the same signature, or NULL
  int num_inputs;
  const char* const* inputs;
  int num_outputs;
  const char* const* outputs;
  int num_attrs;
  const char* const* attrs;
  int num_kernels;
  const gobn_binding* kernels;  // CPU kernels
  int num_gpu_kernels;
  const gobn_binding* gpu_kernels;
  int num_host_memory;
  const char* const* host_memory;  // args a GPU kernel keeps in host memory
  // The kernels' create callbacks, by flags: GOBN_ON_GPU for a GPU kernel,
  // GOBN_AS_STOCK for one registered under the stock op's name (NULL where
  // there is no such kernel).
  void* (*create[4])(TF_OpKernelConstruction*);
  void (*shape)(TF_ShapeInferenceContext*, TF_Status*);
  // The op's XLA FFI handlers, by GOBN_ON_GPU: for XLA's host platform, and
  // its CUDA one (NULL without GPU kernels); see xla.h.
  gobn_xla_handler* xla[2];
} gobn_op_spec;

extern const gobn_op_spec gobn_ops[];
extern const int gobn_num_ops;

// C trampolines into the exported Go callbacks (register.c).
#define GOBN_ON_GPU 1
#define GOBN_AS_STOCK 2
void* gobn_create(TF_OpKernelConstruction* ctx, int op, int flags);

// gobn_enable registers gobn's kernels under the stock ops' names, for
// every dtype and device gobn has kernels for, with a priority above
// stock's kernels (see register.c). It runs once; later calls return the
// first call's result: the number of kernels registered, or -1 with the
// reason in gobn_registration_error.
int gobn_enable(void);
void gobn_shape(TF_ShapeInferenceContext* ctx, int op, TF_Status* status);

// GOBN_TRAMPOLINES(i) defines op i's callbacks for registry_gen.c:
// TensorFlow's and XLA's carry no data of their own, so each passes its
// op's index on. A create callback a way the op's kernels are registered
// (flags: GOBN_ON_GPU, GOBN_AS_STOCK) and an XLA FFI handler a platform
// (host; CUDA, GOBN_ON_GPU); gobn_ops names those the op has.
#define GOBN_CALLBACK static __attribute__((unused))
#define GOBN_TRAMPOLINES(i) \
  GOBN_CALLBACK void* op##i##_create0(TF_OpKernelConstruction* ctx) { return gobn_create(ctx, i, 0); } \
  GOBN_CALLBACK void* op##i##_create1(TF_OpKernelConstruction* ctx) { return gobn_create(ctx, i, 1); } \
  GOBN_CALLBACK void* op##i##_create2(TF_OpKernelConstruction* ctx) { return gobn_create(ctx, i, 2); } \
  GOBN_CALLBACK void* op##i##_create3(TF_OpKernelConstruction* ctx) { return gobn_create(ctx, i, 3); } \
  GOBN_CALLBACK void op##i##_shape(TF_ShapeInferenceContext* ctx, TF_Status* status) { gobn_shape(ctx, i, status); } \
  GOBN_CALLBACK gobn_xla_error* op##i##_xla0(gobn_xla_frame* frame) { return gobn_xla_call(frame, i, 0); } \
  GOBN_CALLBACK gobn_xla_error* op##i##_xla1(gobn_xla_frame* frame) { return gobn_xla_call(frame, i, 1); }

// A tensor of a running kernel as Go sees it, filled in by one C call
// instead of one per field: dims holds the first GOBN_INLINE_DIMS dims (Go asks
// TF_Dim for the rest of a tensor of higher rank).
#define GOBN_INLINE_DIMS 8
typedef struct {
  TF_Tensor* tensor;
  void* data;
  size_t bytes;
  int dtype;
  int ndims;
  int64_t dims[GOBN_INLINE_DIMS];
} gobn_tensor;

// gobn_inputs fetches the first min(TF_NumInputs, cap) inputs into out. It
// sets *total to TF_NumInputs and *fetched to how many it fetched (the caller
// deletes those), and returns the status code (TF_OK, or the failure of the
// input after the fetched ones, with its message in status).
TF_Code gobn_inputs(TF_OpKernelContext* ctx, gobn_tensor* out, int cap, int* total, int* fetched,
                    TF_Status* status);

// gobn_allocate allocates output i and describes it into *out (out->tensor is
// NULL on failure). It returns the status code.
TF_Code gobn_allocate(TF_OpKernelContext* ctx, int i, TF_DataType dtype, const int64_t* dims, int ndims,
                      size_t bytes, gobn_tensor* out, TF_Status* status);

// gobn_forward_or_allocate is gobn_allocate, except that output i takes over
// the buffer of one of the inputs in the bit set candidates (the lowest
// first) where TensorFlow finds nothing else references it. inputs are the
// kernel's references from gobn_inputs; those of the candidates are deleted
// and set to NULL first, since TensorFlow would count them.
TF_Code gobn_forward_or_allocate(TF_OpKernelContext* ctx, int i, TF_Tensor** inputs, unsigned candidates,
                                 const int64_t* dims, int ndims, gobn_tensor* out, TF_Status* status);

// gobn_allocate_temp allocates a temporary of bytes bytes in the kernel's
// device memory and describes it into *out (out->tensor is NULL on failure).
// It returns the status code.
TF_Code gobn_allocate_temp(TF_OpKernelContext* ctx, int64_t bytes, gobn_tensor* out, TF_Status* status);

// gobn_delete_tensors deletes the n tensors of ts, skipping NULLs.
void gobn_delete_tensors(TF_Tensor* const* ts, int n);

// gobn_tf_stream sets *stream to TensorFlow's compute stream (a CUstream)
// for the running GPU kernel ctx, through the framework library's
// eigen_device<Eigen::GpuDevice>() (stream.c), or to 0. It returns one of
// the codes below. Call it for GPU kernels only.
enum {
  GOBN_STREAM_OK = 0,
  GOBN_STREAM_NO_SYMBOL = 1,  // this TensorFlow does not export the function
  GOBN_STREAM_NO_DEVICE = 2,  // the context has no GPU device
  GOBN_STREAM_NO_STREAM = 3,  // the device has no stream
};
int gobn_tf_stream(TF_OpKernelContext* ctx, uintptr_t* stream);

// The first registration failure, or "" when all went well.
const char* gobn_registration_error(void);

// One copy per process (library.c). GOBN_SONAME is the library's soname, as
// the Makefile links it.
#define GOBN_SONAME "libgobn.so"
extern const char gobn_copy_marker[];

// gobn_library_file returns the absolute path of the file this copy was
// loaded from ("" if the loader cannot tell).
const char* gobn_library_file(void);

// gobn_other_copy returns the file of a copy of gobn loaded before this one,
// or NULL when there is none. The constructor calls it first: it also notes
// this copy's file for gobn_library_file.
const char* gobn_other_copy(void);

// gobn_refuse_second_copy registers an op definition that fails, with a
// message naming first (the other copy's file) and this one: the load of
// this copy through TensorFlow fails with that message.
void gobn_refuse_second_copy(const char* first);

#endif  // GOBN_CAPI_GOBN_H_
