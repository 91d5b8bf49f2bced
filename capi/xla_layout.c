// The layout of xla.h's structs against XLA's own header, where the
// TensorFlow the library is built against has it (tensorflow/include, from
// 2.17 on; the pinned 2.21's is API 0.2, whose header C can read): a
// mismatch fails the build. The layouts of 0.0 and 0.1 are the wheels' of
// 2.17 to 2.20 (xla.h says where they differ), which python_tests/test_xla.py
// runs on in make compat.
#include <stddef.h>

#include "xla.h"

#if defined(__has_include)
#if __has_include("xla/ffi/api/c_api.h")
#include "xla/ffi/api/c_api.h"
#if XLA_FFI_API_MAJOR == 0 && XLA_FFI_API_MINOR >= 2
#define GOBN_XLA_LAYOUT_CHECKED 1

#define SAME(ours, field, theirs, their_field)                                        \
  _Static_assert(offsetof(ours, field) == offsetof(theirs, their_field) &&           \
                     sizeof(((ours*)0)->field) == sizeof(((theirs*)0)->their_field), \
                 #ours "." #field " is not " #theirs "." #their_field)
#define SIZE(ours, last, theirs) \
  _Static_assert(GOBN_XLA_STRUCT_SIZE(ours, last) == theirs##_STRUCT_SIZE, #ours " is not as large as " #theirs)

SAME(gobn_xla_span, ptr, XLA_FFI_ByteSpan, ptr);
SAME(gobn_xla_span, len, XLA_FFI_ByteSpan, len);
SAME(gobn_xla_buffer, dtype, XLA_FFI_Buffer, dtype);
SAME(gobn_xla_buffer, data, XLA_FFI_Buffer, data);
SAME(gobn_xla_buffer, rank, XLA_FFI_Buffer, rank);
SAME(gobn_xla_buffer, dims, XLA_FFI_Buffer, dims);
SAME(gobn_xla_buffers, size, XLA_FFI_Args, size);
SAME(gobn_xla_buffers, types, XLA_FFI_Args, types);
SAME(gobn_xla_buffers, values, XLA_FFI_Args, args);
SAME(gobn_xla_buffers, size, XLA_FFI_Rets, size);
SAME(gobn_xla_buffers, types, XLA_FFI_Rets, types);
SAME(gobn_xla_buffers, values, XLA_FFI_Rets, rets);
SAME(gobn_xla_attrs, size, XLA_FFI_Attrs, size);
SAME(gobn_xla_attrs, types, XLA_FFI_Attrs, types);
SAME(gobn_xla_attrs, names, XLA_FFI_Attrs, names);
SAME(gobn_xla_attrs, attrs, XLA_FFI_Attrs, attrs);
SAME(gobn_xla_scalar, dtype, XLA_FFI_Scalar, dtype);
SAME(gobn_xla_scalar, value, XLA_FFI_Scalar, value);
SAME(gobn_xla_frame, extension_start, XLA_FFI_CallFrame, extension_start);
SAME(gobn_xla_frame, api, XLA_FFI_CallFrame, api);
SAME(gobn_xla_frame, ctx, XLA_FFI_CallFrame, ctx);
SAME(gobn_xla_frame, stage, XLA_FFI_CallFrame, stage);
SAME(gobn_xla_frame, args, XLA_FFI_CallFrame, args);
SAME(gobn_xla_frame, rets, XLA_FFI_CallFrame, rets);
SAME(gobn_xla_frame, attrs, XLA_FFI_CallFrame, attrs);
SAME(gobn_xla_extension, type, XLA_FFI_Extension_Base, type);
SAME(gobn_xla_extension, next, XLA_FFI_Extension_Base, next);
SAME(gobn_xla_version, major_version, XLA_FFI_Api_Version, major_version);
SAME(gobn_xla_version, minor_version, XLA_FFI_Api_Version, minor_version);
SAME(gobn_xla_metadata, api_version, XLA_FFI_Metadata, api_version);
SAME(gobn_xla_metadata, traits, XLA_FFI_Metadata, traits);
SAME(gobn_xla_metadata_extension, metadata, XLA_FFI_Metadata_Extension, metadata);
SAME(gobn_xla_error_create_args, message, XLA_FFI_Error_Create_Args, message);
SAME(gobn_xla_error_create_args, errc, XLA_FFI_Error_Create_Args, errc);
SAME(gobn_xla_error_message_args, error, XLA_FFI_Error_GetMessage_Args, error);
SAME(gobn_xla_error_message_args, message, XLA_FFI_Error_GetMessage_Args, message);
SAME(gobn_xla_error_destroy_args, error, XLA_FFI_Error_Destroy_Args, error);
SAME(gobn_xla_stream_args, ctx, XLA_FFI_Stream_Get_Args, ctx);
SAME(gobn_xla_stream_args, stream, XLA_FFI_Stream_Get_Args, stream);
SAME(gobn_xla_allocate_args, ctx, XLA_FFI_DeviceMemory_Allocate_Args, ctx);
SAME(gobn_xla_allocate_args, size, XLA_FFI_DeviceMemory_Allocate_Args, size);
SAME(gobn_xla_allocate_args, alignment, XLA_FFI_DeviceMemory_Allocate_Args, alignment);
SAME(gobn_xla_allocate_args, data, XLA_FFI_DeviceMemory_Allocate_Args, data);
SAME(gobn_xla_free_args, ctx, XLA_FFI_DeviceMemory_Free_Args, ctx);
SAME(gobn_xla_free_args, size, XLA_FFI_DeviceMemory_Free_Args, size);
SAME(gobn_xla_free_args, data, XLA_FFI_DeviceMemory_Free_Args, data);
SAME(gobn_xla_register_args_v1, name, XLA_FFI_Handler_Register_Args, name);
SAME(gobn_xla_register_args_v1, platform, XLA_FFI_Handler_Register_Args, platform);
SAME(gobn_xla_register_args_v1, bundle, XLA_FFI_Handler_Register_Args, bundle);
SAME(gobn_xla_register_args_v1, traits, XLA_FFI_Handler_Register_Args, traits);

SIZE(gobn_xla_buffer, dims, XLA_FFI_Buffer);
SIZE(gobn_xla_version, minor_version, XLA_FFI_Api_Version);
SIZE(gobn_xla_metadata, traits, XLA_FFI_Metadata);
SIZE(gobn_xla_metadata_extension, metadata, XLA_FFI_Metadata_Extension);
SIZE(gobn_xla_error_create_args, errc, XLA_FFI_Error_Create_Args);
SIZE(gobn_xla_error_message_args, message, XLA_FFI_Error_GetMessage_Args);
SIZE(gobn_xla_error_destroy_args, error, XLA_FFI_Error_Destroy_Args);
SIZE(gobn_xla_stream_args, stream, XLA_FFI_Stream_Get_Args);
SIZE(gobn_xla_allocate_args, data, XLA_FFI_DeviceMemory_Allocate_Args);
SIZE(gobn_xla_free_args, data, XLA_FFI_DeviceMemory_Free_Args);
SIZE(gobn_xla_register_args_v1, traits, XLA_FFI_Handler_Register_Args);

// The table: the API's version, then the functions gobn calls, by index.
#define FUNCTION(index, field)                                                                            \
  _Static_assert(GOBN_XLA_FUNCTIONS_V1 + (index) * sizeof(void*) == offsetof(XLA_FFI_Api, field), \
                 #field " is not function " #index)
_Static_assert(2 * sizeof(void*) == offsetof(XLA_FFI_Api, api_version), "the API's version is not third");
FUNCTION(GOBN_XLA_ERROR_CREATE, XLA_FFI_Error_Create);
FUNCTION(GOBN_XLA_ERROR_GET_MESSAGE, XLA_FFI_Error_GetMessage);
FUNCTION(GOBN_XLA_ERROR_DESTROY, XLA_FFI_Error_Destroy);
FUNCTION(GOBN_XLA_HANDLER_REGISTER, XLA_FFI_Handler_Register);
FUNCTION(GOBN_XLA_STREAM_GET, XLA_FFI_Stream_Get);
FUNCTION(GOBN_XLA_DEVICE_MEMORY_ALLOCATE, XLA_FFI_DeviceMemory_Allocate);
FUNCTION(GOBN_XLA_DEVICE_MEMORY_FREE, XLA_FFI_DeviceMemory_Free);

_Static_assert(GOBN_XLA_PRED == XLA_FFI_DataType_PRED && GOBN_XLA_S64 == XLA_FFI_DataType_S64 &&
                   GOBN_XLA_F16 == XLA_FFI_DataType_F16 && GOBN_XLA_F32 == XLA_FFI_DataType_F32 &&
                   GOBN_XLA_F64 == XLA_FFI_DataType_F64 && GOBN_XLA_BF16 == XLA_FFI_DataType_BF16,
               "XLA's element types");
_Static_assert(GOBN_XLA_ATTR_SCALAR == XLA_FFI_AttrType_SCALAR && GOBN_XLA_ATTR_STRING == XLA_FFI_AttrType_STRING,
               "XLA's attr types");
_Static_assert(GOBN_XLA_EXTENSION_METADATA == XLA_FFI_Extension_Metadata, "XLA's metadata extension");
_Static_assert(XLA_FFI_ExecutionStage_EXECUTE == 3, "XLA's execute stage");
#endif
#endif
#endif

#ifndef GOBN_XLA_LAYOUT_CHECKED
#define GOBN_XLA_LAYOUT_CHECKED 0
#endif

int gobn_xla_layout_checked(void) { return GOBN_XLA_LAYOUT_CHECKED; }
