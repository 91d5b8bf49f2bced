// gobn's handlers inside XLA: the part of XLA's FFI (xla/ffi/api/c_api.h)
// gobn uses, as it lies in memory in every TensorFlow release that has it.
//
// TensorFlow exports the FFI's table of functions, XLA_FFI_Api, from 2.17 on
// (xla::ffi::GetXlaFfiApi()). gobn looks it up when it loads (xla.c) and
// links nothing new, so the library still loads where it is missing. The
// layouts below are XLA's, checked against the headers of each release's
// wheel (tensorflow/include/xla/ffi/api/c_api.h): they differ between API
// 0.0 (TensorFlow 2.17) and 0.1 (2.18 to 2.20) and 0.2 (2.21) where this file
// says so, and are the same otherwise. xla_layout.c compares them with the
// header of the TensorFlow the library is built against.
#ifndef GOBN_CAPI_XLA_H_
#define GOBN_CAPI_XLA_H_

#include <stddef.h>
#include <stdint.h>

// XLA_FFI_Error: opaque, owned by whoever receives it.
typedef struct gobn_xla_error gobn_xla_error;

// XLA_FFI_ByteSpan: a string, not terminated.
typedef struct {
  const char* ptr;
  size_t len;
} gobn_xla_span;

// XLA_FFI_Buffer: an argument or result of a call (dtype is XLA's
// PrimitiveType: GOBN_XLA_F32 and the others below).
typedef struct {
  size_t struct_size;
  void* extension_start;
  int dtype;
  void* data;
  int64_t rank;
  int64_t* dims;
} gobn_xla_buffer;

// XLA's element types gobn's handlers take (xla_data.proto's PrimitiveType).
#define GOBN_XLA_PRED 1
#define GOBN_XLA_S64 5
#define GOBN_XLA_F16 10
#define GOBN_XLA_F32 11
#define GOBN_XLA_F64 12
#define GOBN_XLA_BF16 16

// XLA_FFI_Args and XLA_FFI_Rets: the call's buffers (types: 1, a buffer).
typedef struct {
  size_t struct_size;
  void* extension_start;
  int64_t size;
  int* types;
  void** values;  // gobn_xla_buffer*
} gobn_xla_buffers;

// XLA_FFI_Attrs: the custom call's backend_config, sorted by name. An attr of
// type GOBN_XLA_ATTR_SCALAR is a gobn_xla_scalar, of type
// GOBN_XLA_ATTR_STRING a gobn_xla_span.
#define GOBN_XLA_ATTR_SCALAR 3
#define GOBN_XLA_ATTR_STRING 4
typedef struct {
  size_t struct_size;
  void* extension_start;
  int64_t size;
  int* types;
  gobn_xla_span** names;
  void** attrs;
} gobn_xla_attrs;

// XLA_FFI_Scalar.
typedef struct {
  int dtype;
  void* value;
} gobn_xla_scalar;

// XLA_FFI_CallFrame, as far as gobn reads it (0.2 adds a field after attrs).
// extension_start is a reserved pointer in 0.0.
typedef struct gobn_xla_frame {
  size_t struct_size;
  struct gobn_xla_extension* extension_start;
  const void* api;
  void* ctx;  // XLA_FFI_ExecutionContext*
  int stage;  // execute: 2 in API 0.0, 3 since 0.1 (an instantiate stage came first)
  gobn_xla_buffers args;
  gobn_xla_buffers rets;
  gobn_xla_attrs attrs;
} gobn_xla_frame;

// XLA_FFI_Handler.
typedef gobn_xla_error* gobn_xla_handler(gobn_xla_frame* frame);

// XLA_FFI_Extension_Base. Since 0.1, XLA asks a handler for its metadata
// (when it registers, in 0.2) by calling it with a frame whose first
// extension is of type GOBN_XLA_EXTENSION_METADATA.
#define GOBN_XLA_EXTENSION_METADATA 1
typedef struct gobn_xla_extension {
  size_t struct_size;
  int type;
  struct gobn_xla_extension* next;
} gobn_xla_extension;

// XLA_FFI_Api_Version.
typedef struct {
  size_t struct_size;
  void* extension_start;
  int major_version;
  int minor_version;
} gobn_xla_version;

// XLA_FFI_Metadata, through traits (0.2 adds a state type after it, which
// gobn leaves as XLA set it), and XLA_FFI_Metadata_Extension.
typedef struct {
  size_t struct_size;
  gobn_xla_version api_version;
  uint32_t traits;
} gobn_xla_metadata;

typedef struct {
  gobn_xla_extension base;
  gobn_xla_metadata* metadata;
} gobn_xla_metadata_extension;

// The functions of XLA_FFI_Api gobn calls, by their index in the table. The
// table starts after {struct_size, extension_start, api_version,
// internal_api} since 0.1, and after {struct_size, priv, internal_api} in
// 0.0, which has no api_version and ends after TypeId_Register and
// ExecutionContext_Get (index 6): DeviceMemory_Allocate and _Free came in
// 0.1. (XLA's struct_size of the table counts up to Stream_Get until 0.2, so
// it does not tell how long the table is.)
#define GOBN_XLA_ERROR_CREATE 0
#define GOBN_XLA_ERROR_GET_MESSAGE 1
#define GOBN_XLA_ERROR_DESTROY 2
#define GOBN_XLA_HANDLER_REGISTER 3
#define GOBN_XLA_STREAM_GET 4
#define GOBN_XLA_DEVICE_MEMORY_ALLOCATE 9
#define GOBN_XLA_DEVICE_MEMORY_FREE 10

// The byte offset of the table's functions: in API 0.0, and since 0.1.
#define GOBN_XLA_FUNCTIONS_V0 24
#define GOBN_XLA_FUNCTIONS_V1 48

// The argument structs of those functions (the same in every version):
// XLA_FFI_Error_Create_Args, _GetMessage_Args, _Destroy_Args,
// XLA_FFI_Stream_Get_Args, XLA_FFI_DeviceMemory_Allocate_Args, _Free_Args.
typedef struct {
  size_t struct_size;
  void* extension_start;
  const char* message;
  int errc;  // absl's codes, which TF_Code shares
} gobn_xla_error_create_args;

typedef struct {
  size_t struct_size;
  void* extension_start;
  gobn_xla_error* error;
  const char* message;  // out
} gobn_xla_error_message_args;

typedef struct {
  size_t struct_size;
  void* extension_start;
  gobn_xla_error* error;
} gobn_xla_error_destroy_args;

typedef struct {
  size_t struct_size;
  void* extension_start;
  void* ctx;
  void* stream;  // out: a CUstream on the CUDA platform
} gobn_xla_stream_args;

typedef struct {
  size_t struct_size;
  void* extension_start;
  void* ctx;
  size_t size;
  size_t alignment;
  void* data;  // out
} gobn_xla_allocate_args;

typedef struct {
  size_t struct_size;
  void* extension_start;
  void* ctx;
  size_t size;
  void* data;
} gobn_xla_free_args;

// XLA_FFI_Handler_Register_Args: the bundle of stage handlers has prepare,
// initialize and execute in 0.0, and instantiate before them since 0.1.
typedef struct {
  size_t struct_size;
  void* extension_start;
  gobn_xla_span name;
  gobn_xla_span platform;
  gobn_xla_handler* bundle[3];
  uint32_t traits;
} gobn_xla_register_args_v0;

typedef struct {
  size_t struct_size;
  void* extension_start;
  gobn_xla_span name;
  gobn_xla_span platform;
  gobn_xla_handler* bundle[4];
  uint32_t traits;
} gobn_xla_register_args_v1;

// XLA's struct sizes count up to the end of the last field, without the
// padding after it.
#define GOBN_XLA_STRUCT_SIZE(type, last) (offsetof(type, last) + sizeof(((type*)0)->last))

// ---------------------------------------------------------------------------
// gobn's side (xla.c).

// gobn_xla_register looks up XLA's FFI and registers each op's handlers, for
// platform "host" and, in a library with the CUDA path and an API that can
// allocate device memory (0.1 on), "cuda". It runs once, while the library
// loads; where TensorFlow has no FFI, it registers nothing and notes why.
void gobn_xla_register(void);

// gobn_xla_call is every handler's body: it answers XLA's metadata query
// and skips stages other than execute in C (a query comes while the library
// loads, before Go may run), and runs the op's kernel through Go otherwise.
// flags is GOBN_ON_GPU for the CUDA platform's handler.
gobn_xla_error* gobn_xla_call(gobn_xla_frame* frame, int op, int flags);

// What gobn_xla_register did: the API version it found (major -1: none),
// the handlers it registered for each platform, the library the API came
// from, and why it registered none or not every one ("" when it did).
typedef struct {
  int major, minor;
  int host_handlers, cuda_handlers;
  const char* library;
  const char* reason;
} gobn_xla_status_info;
void gobn_xla_status(gobn_xla_status_info* out);

// gobn_xla_error_new makes an XLA error of code (absl's, as TF_Code) with a
// copy of message; NULL if the API is missing.
gobn_xla_error* gobn_xla_error_new(int code, const char* message);

// gobn_xla_error_discard destroys an error XLA returned to gobn.
void gobn_xla_error_discard(gobn_xla_error* err);

// gobn_xla_stream returns the CUstream XLA runs the call on (0 if it has
// none), with the failure in *err (the caller returns it to XLA).
uintptr_t gobn_xla_stream(void* ctx, gobn_xla_error** err);

// gobn_xla_allocate allocates bytes of device memory for the call (at least
// 16-byte aligned), and gobn_xla_free frees it: XLA's allocator, ordered on
// the call's stream as XLA's own scratch memory is.
void* gobn_xla_allocate(void* ctx, size_t bytes, gobn_xla_error** err);
gobn_xla_error* gobn_xla_free(void* ctx, void* data, size_t bytes);

// gobn_xla_layout_checked returns 1 where the build compared the structs
// above with XLA's header (xla_layout.c), 0 where it had none.
int gobn_xla_layout_checked(void);

#endif  // GOBN_CAPI_XLA_H_
