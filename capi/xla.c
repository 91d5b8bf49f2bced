// gobn's ops as XLA FFI handlers: the API's lookup, registration while the
// library loads, and the C half of every call (xla.h says what XLA's side
// looks like in each release).

#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "_cgo_export.h"
#include "gobn.h"

// The API as found: its version, its functions, and which stage number is
// execute.
static struct {
  int major, minor;  // major -1: no API
  int v0;            // API 0.0's layout (xla.h)
  void* const* functions;
  int execute_stage;
  int host_handlers, cuda_handlers;
  char library[256];
  char reason[512];
} api = {.major = -1};

// The names TensorFlow exports the table's getter under: XLA's C++ function
// (every release from 2.17 on) and its C alias (2.21's GPU build).
static const char* const getters[] = {"_ZN3xla3ffi12GetXlaFfiApiEv", "XLA_FFI_GetApi"};

// The libraries that may hold XLA: a Python process loads them without
// RTLD_GLOBAL in some releases (2.17), so a global lookup misses them.
static const char* const holders[] = {"libtensorflow_cc.so.2", "libtensorflow_framework.so.2"};

static void* find_getter(void) {
  for (size_t i = 0; i < sizeof getters / sizeof getters[0]; i++) {
    void* f = dlsym(RTLD_DEFAULT, getters[i]);
    if (f != NULL) return f;
  }
  for (size_t h = 0; h < sizeof holders / sizeof holders[0]; h++) {
    void* handle = dlopen(holders[h], RTLD_LAZY | RTLD_NOLOAD);  // only one already loaded
    if (handle == NULL) continue;
    void* f = NULL;
    for (size_t i = 0; f == NULL && i < sizeof getters / sizeof getters[0]; i++) f = dlsym(handle, getters[i]);
    dlclose(handle);  // the library stays, held by whoever loaded it
    if (f != NULL) return f;
  }
  return NULL;
}

// open_api finds the table and reads its version: since 0.1 an
// XLA_FFI_Api_Version follows struct_size and extension_start; 0.0 has
// internal_api there, a pointer, never the version's struct size.
static int open_api(void) {
  void* getter = find_getter();
  if (getter == NULL) {
    snprintf(api.reason, sizeof api.reason,
             "this TensorFlow exports no XLA FFI (xla::ffi::GetXlaFfiApi, TensorFlow 2.17 and later)");
    return 0;
  }
  Dl_info info;
  if (dladdr(getter, &info) != 0 && info.dli_fname != NULL) {
    const char* slash = strrchr(info.dli_fname, '/');
    snprintf(api.library, sizeof api.library, "%s", slash != NULL ? slash + 1 : info.dli_fname);
  }
  const char* table = ((const void* (*)(void))getter)();
  if (table == NULL) {
    snprintf(api.reason, sizeof api.reason, "XLA's FFI returned no API table");
    return 0;
  }
  const gobn_xla_version* v = (const gobn_xla_version*)(table + 2 * sizeof(void*));
  if (v->struct_size == GOBN_XLA_STRUCT_SIZE(gobn_xla_version, minor_version)) {
    api.major = v->major_version;
    api.minor = v->minor_version;
    api.functions = (void* const*)(table + GOBN_XLA_FUNCTIONS_V1);
    api.execute_stage = 3;
  } else {
    api.major = 0;
    api.minor = 0;
    api.v0 = 1;
    api.functions = (void* const*)(table + GOBN_XLA_FUNCTIONS_V0);
    api.execute_stage = 2;
  }
  if (api.major != 0) {
    snprintf(api.reason, sizeof api.reason, "XLA FFI API %d.%d: gobn knows major version 0", api.major, api.minor);
    api.major = -1;
    return 0;
  }
  for (int i = 0; i <= GOBN_XLA_STREAM_GET; i++) {
    if (api.functions[i] == NULL) {
      snprintf(api.reason, sizeof api.reason, "XLA FFI API 0.%d has no function %d", api.minor, i);
      api.major = -1;
      return 0;
    }
  }
  return 1;
}

typedef gobn_xla_error* (*api_function)(void* args);

static gobn_xla_error* call_api(int function, void* args) {
  return ((api_function)api.functions[function])(args);
}

// The device memory functions came in API 0.1.
static int can_allocate(void) {
  return !api.v0 && api.functions[GOBN_XLA_DEVICE_MEMORY_ALLOCATE] != NULL &&
         api.functions[GOBN_XLA_DEVICE_MEMORY_FREE] != NULL;
}

// take_message copies err's message into api.reason (once) and destroys err.
static void take_message(gobn_xla_error* err, const char* what) {
  gobn_xla_error_message_args m = {GOBN_XLA_STRUCT_SIZE(gobn_xla_error_message_args, message), NULL, err, NULL};
  call_api(GOBN_XLA_ERROR_GET_MESSAGE, &m);
  if (api.reason[0] == '\0') {
    snprintf(api.reason, sizeof api.reason, "registering %s: %s", what, m.message != NULL ? m.message : "?");
  }
  gobn_xla_error_discard(err);
}

static int register_handler(const char* name, const char* platform, gobn_xla_handler* handler) {
  gobn_xla_span n = {name, strlen(name)}, p = {platform, strlen(platform)};
  gobn_xla_error* err;
  if (api.v0) {
    gobn_xla_register_args_v0 a = {GOBN_XLA_STRUCT_SIZE(gobn_xla_register_args_v0, traits), NULL, n, p,
                                   {NULL, NULL, handler}, 0};
    err = call_api(GOBN_XLA_HANDLER_REGISTER, &a);
  } else {
    gobn_xla_register_args_v1 a = {GOBN_XLA_STRUCT_SIZE(gobn_xla_register_args_v1, traits), NULL, n, p,
                                   {NULL, NULL, NULL, handler}, 0};
    err = call_api(GOBN_XLA_HANDLER_REGISTER, &a);
  }
  if (err != NULL) {
    char what[256];
    snprintf(what, sizeof what, "%s for %s", name, platform);
    take_message(err, what);
    return 0;
  }
  return 1;
}

void gobn_xla_register(void) {
  if (!open_api()) return;
  for (int i = 0; i < gobn_num_ops; i++) {
    const gobn_op_spec* op = &gobn_ops[i];
    api.host_handlers += register_handler(op->name, "host", op->xla[0]);
#ifdef GOBN_CUDA
    if (op->xla[GOBN_ON_GPU] != NULL && can_allocate()) {
      api.cuda_handlers += register_handler(op->name, "cuda", op->xla[GOBN_ON_GPU]);
    }
#endif
  }
#ifdef GOBN_CUDA
  if (!can_allocate() && api.reason[0] == '\0') {
    snprintf(api.reason, sizeof api.reason,
             "XLA FFI API 0.%d cannot allocate device memory (0.1, TensorFlow 2.18, can): no handlers for the GPU",
             api.minor);
  }
#endif
}

void gobn_xla_status(gobn_xla_status_info* out) {
  out->major = api.major;
  out->minor = api.minor;
  out->host_handlers = api.host_handlers;
  out->cuda_handlers = api.cuda_handlers;
  out->library = api.library;
  out->reason = api.reason;
}

// answer_metadata fills in the metadata XLA asks for: the API version the
// handler speaks (the one it found: gobn reads each version's layout) and
// no traits (its calls allocate, so they cannot be captured into a command
// buffer). Fields beyond metadata->struct_size are not XLA's to give.
static gobn_xla_error* answer_metadata(gobn_xla_metadata_extension* ext) {
  gobn_xla_metadata* m = ext->metadata;
  if (m == NULL || m->struct_size < GOBN_XLA_STRUCT_SIZE(gobn_xla_metadata, traits)) {
    return gobn_xla_error_new(13, "gobn: XLA asked for metadata in a struct gobn does not know");
  }
  m->api_version = (gobn_xla_version){GOBN_XLA_STRUCT_SIZE(gobn_xla_version, minor_version), NULL, api.major, api.minor};
  m->traits = 0;
  return NULL;
}

gobn_xla_error* gobn_xla_call(gobn_xla_frame* frame, int op, int flags) {
  if (!api.v0 && frame->extension_start != NULL &&
      frame->extension_start->type == GOBN_XLA_EXTENSION_METADATA) {
    return answer_metadata((gobn_xla_metadata_extension*)frame->extension_start);
  }
  if (frame->stage != api.execute_stage) return NULL;  // only execute is registered
  return gobnXLACall(frame, op, flags);
}

gobn_xla_error* gobn_xla_error_new(int code, const char* message) {
  if (api.major < 0) return NULL;
  gobn_xla_error_create_args a = {GOBN_XLA_STRUCT_SIZE(gobn_xla_error_create_args, errc), NULL, message, code};
  return call_api(GOBN_XLA_ERROR_CREATE, &a);
}

void gobn_xla_error_discard(gobn_xla_error* err) {
  gobn_xla_error_destroy_args d = {GOBN_XLA_STRUCT_SIZE(gobn_xla_error_destroy_args, error), NULL, err};
  call_api(GOBN_XLA_ERROR_DESTROY, &d);
}

uintptr_t gobn_xla_stream(void* ctx, gobn_xla_error** err) {
  gobn_xla_stream_args a = {GOBN_XLA_STRUCT_SIZE(gobn_xla_stream_args, stream), NULL, ctx, NULL};
  *err = call_api(GOBN_XLA_STREAM_GET, &a);
  return (uintptr_t)a.stream;
}

// XLA takes alignments up to 16 bytes (kMaxAlignment in xla/ffi/ffi_api.cc),
// enough for the workspace's doubles and vector loads; TensorFlow's allocator
// gives 256 anyway.
void* gobn_xla_allocate(void* ctx, size_t bytes, gobn_xla_error** err) {
  gobn_xla_allocate_args a = {GOBN_XLA_STRUCT_SIZE(gobn_xla_allocate_args, data), NULL, ctx, bytes, 16, NULL};
  *err = call_api(GOBN_XLA_DEVICE_MEMORY_ALLOCATE, &a);
  return a.data;
}

gobn_xla_error* gobn_xla_free(void* ctx, void* data, size_t bytes) {
  gobn_xla_free_args a = {GOBN_XLA_STRUCT_SIZE(gobn_xla_free_args, data), NULL, ctx, bytes, data};
  return call_api(GOBN_XLA_DEVICE_MEMORY_FREE, &a);
}
