// Registration of gobn's ops and their CPU and GPU kernels while the library
// is loaded.
//
// tf.load_op_library collects the ops registered while dlopen runs and calls no
// entry point, so registration happens in a constructor. It is plain C over the
// tables that cmd/gencapi generates from opdef: the Go runtime may not be
// up yet, and calling into Go here can deadlock the loader on older glibc.
// Only the kernel callbacks, which TensorFlow calls later, enter Go.

#include <pthread.h>
#include <stdio.h>

#include "_cgo_export.h"
#include "gobn.h"

static char registration_error[512];

const char* gobn_registration_error(void) { return registration_error; }

static void note_failure(const char* what, const char* name, TF_Status* status) {
  if (registration_error[0] != '\0') return;
  snprintf(registration_error, sizeof registration_error, "gobn: registering %s %s: %s",
           what, name, TF_Message(status));
}

void* gobn_create(TF_OpKernelConstruction* ctx, int op, int flags) {
  return (void*)(uintptr_t)gobnCreate(ctx, op, flags);
}

static void gobn_compute(void* kernel, TF_OpKernelContext* ctx) {
  gobnCompute((uintptr_t)kernel, ctx);
}

static void gobn_delete(void* kernel) { gobnDelete((uintptr_t)kernel); }

void gobn_shape(TF_ShapeInferenceContext* ctx, int op, TF_Status* status) {
  gobnShape(ctx, op, status);
}

static void register_op(const gobn_op_spec* op, TF_Status* status) {
  TF_OpDefinitionBuilder* builder = TF_NewOpDefinitionBuilder(op->name);
  for (int i = 0; i < op->num_inputs; i++) TF_OpDefinitionBuilderAddInput(builder, op->inputs[i]);
  for (int i = 0; i < op->num_outputs; i++) TF_OpDefinitionBuilderAddOutput(builder, op->outputs[i]);
  for (int i = 0; i < op->num_attrs; i++) TF_OpDefinitionBuilderAddAttr(builder, op->attrs[i]);
  TF_OpDefinitionBuilderSetShapeInferenceFunction(builder, op->shape);
  TF_RegisterOpDefinition(builder, status);  // takes the builder, on success or not
  if (TF_GetCode(status) != TF_OK) note_failure("op", op->name, status);
}

// register_kernel registers one kernel of op for the dtype binding b: under
// op->name, or under the stock op's name with priority 1 (GOBN_AS_STOCK in
// flags), on the CPU or the GPU (GOBN_ON_GPU). It returns whether it did.
static int register_kernel(const gobn_op_spec* op, int flags, const gobn_binding* b, TF_Status* status) {
  const int gpu = (flags & GOBN_ON_GPU) != 0;
  const char* device_type = gpu ? "GPU" : "CPU";
  const char* op_name = (flags & GOBN_AS_STOCK) ? op->stock : op->name;
  TF_KernelBuilder* builder = TF_NewKernelBuilder(op_name, device_type, op->create[flags], gobn_compute, gobn_delete);
  TF_KernelBuilder_TypeConstraint(builder, "T", (TF_DataType)b->t, status);
  if (TF_GetCode(status) == TF_OK && b->u >= 0) {
    TF_KernelBuilder_TypeConstraint(builder, "U", (TF_DataType)b->u, status);
  }
  for (int i = 0; gpu && i < op->num_host_memory; i++) {
    TF_KernelBuilder_HostMemory(builder, op->host_memory[i]);
  }
  if (TF_GetCode(status) != TF_OK) {
    note_failure("kernel type constraint for", op_name, status);
    TF_DeleteKernelBuilder(builder);
    return 0;
  }
  if (flags & GOBN_AS_STOCK) {
    // Above the stock kernels' 0: TensorFlow picks the kernel of highest
    // priority for a device, and orders devices by it too, so gobn
    // registers it on every device type it has kernels for (the GPU ones
    // only with the CUDA path), keeping the GPU before the CPU as stock.
    TF_KernelBuilder_Priority(builder, 1);
  }
  char kernel_name[160];
  snprintf(kernel_name, sizeof kernel_name, "gobn:%s_%s_%d_%d", op_name, device_type, b->t, b->u);
  TF_RegisterKernelBuilder(kernel_name, builder, status);  // takes the builder
  if (TF_GetCode(status) != TF_OK) {
    note_failure("kernel", op_name, status);
    return 0;
  }
  return 1;
}

// register_kernels registers op's kernels with flags' GOBN_AS_STOCK: CPU
// kernels, and GPU ones where the library carries the CUDA path (the cgo
// flag GOBN_CUDA, set by the cuda build tag; without it TensorFlow places
// the ops on the CPU, as it should). It returns how many it registered.
static int register_kernels(const gobn_op_spec* op, int flags, TF_Status* status) {
  int n = 0;
  for (int k = 0; k < op->num_kernels; k++) n += register_kernel(op, flags, &op->kernels[k], status);
#ifdef GOBN_CUDA
  for (int k = 0; k < op->num_gpu_kernels; k++) {
    n += register_kernel(op, flags | GOBN_ON_GPU, &op->gpu_kernels[k], status);
  }
#endif
  return n;
}

static pthread_once_t enable_once = PTHREAD_ONCE_INIT;
static int enabled_kernels;
static const char* first_copy;  // another copy's file, when this is a second copy

static void enable(void) {
  if (first_copy != NULL) {
    snprintf(registration_error, sizeof registration_error,
             "gobn: this copy of libgobn.so (%s) is a second one, and registers nothing: the first is %s",
             gobn_library_file(), first_copy);
    enabled_kernels = -1;
    return;
  }
  TF_Status* status = TF_NewStatus();
  int n = 0;
  for (int i = 0; i < gobn_num_ops; i++) {
    if (gobn_ops[i].stock != NULL) n += register_kernels(&gobn_ops[i], GOBN_AS_STOCK, status);
  }
  TF_DeleteStatus(status);
  enabled_kernels = registration_error[0] != '\0' ? -1 : n;
}

int gobn_enable(void) {
  pthread_once(&enable_once, enable);
  return enabled_kernels;
}

__attribute__((constructor)) static void gobn_register(void) {
  first_copy = gobn_other_copy();
  if (first_copy != NULL) {
    // A second copy registers nothing of its own (library.c).
    gobn_refuse_second_copy(first_copy);
    return;
  }
  TF_Status* status = TF_NewStatus();
  for (int i = 0; i < gobn_num_ops; i++) {
    register_op(&gobn_ops[i], status);
    register_kernels(&gobn_ops[i], 0, status);
  }
  TF_DeleteStatus(status);
  gobn_xla_register();  // xla.c: where TensorFlow has XLA's FFI
}
