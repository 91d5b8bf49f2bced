// Registration of gobn's ops and their CPU and GPU kernels while the library
// is loaded.
//
// tf.load_op_library collects the ops registered while dlopen runs and calls no
// entry point, so registration happens in a constructor. It is plain C over the
// tables that internal/gencapi generates from opdef: the Go runtime may not be
// up yet, and calling into Go here can deadlock the loader on older glibc.
// Only the kernel callbacks, which TensorFlow calls later, enter Go.

#include <stdio.h>
#include <string.h>

#include "_cgo_export.h"
#include "gobn.h"

static char registration_error[512];

const char* gobn_registration_error(void) { return registration_error; }

static void note_failure(const char* what, const char* name, TF_Status* status) {
  if (registration_error[0] != '\0') return;
  snprintf(registration_error, sizeof registration_error, "gobn: registering %s %s: %s",
           what, name, TF_Message(status));
}

void* gobn_create(TF_OpKernelConstruction* ctx, int op, int on_gpu) {
  return (void*)(uintptr_t)gobnCreate(ctx, op, on_gpu);
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

// register_kernel registers one kernel of op on device_type ("CPU" or
// "GPU") for the dtype binding b.
static void register_kernel(const gobn_op_spec* op, const char* device_type, const gobn_binding* b,
                            TF_Status* status) {
  int gpu = strcmp(device_type, "GPU") == 0;
  TF_KernelBuilder* builder =
      TF_NewKernelBuilder(op->name, device_type, gpu ? op->create_gpu : op->create, gobn_compute, gobn_delete);
  TF_KernelBuilder_TypeConstraint(builder, "T", (TF_DataType)b->t, status);
  if (TF_GetCode(status) == TF_OK && b->u >= 0) {
    TF_KernelBuilder_TypeConstraint(builder, "U", (TF_DataType)b->u, status);
  }
  for (int i = 0; gpu && i < op->num_host_memory; i++) {
    TF_KernelBuilder_HostMemory(builder, op->host_memory[i]);
  }
  if (TF_GetCode(status) != TF_OK) {
    note_failure("kernel type constraint for", op->name, status);
    TF_DeleteKernelBuilder(builder);
    return;
  }
  char kernel_name[160];
  snprintf(kernel_name, sizeof kernel_name, "%s_%s_%d_%d", op->name, device_type, b->t, b->u);
  TF_RegisterKernelBuilder(kernel_name, builder, status);  // takes the builder
  if (TF_GetCode(status) != TF_OK) note_failure("kernel", op->name, status);
}

static void register_kernels(const gobn_op_spec* op, TF_Status* status) {
  for (int k = 0; k < op->num_kernels; k++) register_kernel(op, "CPU", &op->kernels[k], status);
  // GPU kernels only where the library carries the CUDA path (the cgo flag
  // GOBN_CUDA, set by the cuda build tag): without it TensorFlow places the
  // ops on the CPU, as it should.
#ifdef GOBN_CUDA
  for (int k = 0; k < op->num_gpu_kernels; k++) register_kernel(op, "GPU", &op->gpu_kernels[k], status);
#endif
}

__attribute__((constructor)) static void gobn_register(void) {
  TF_Status* status = TF_NewStatus();
  for (int i = 0; i < gobn_num_ops; i++) {
    register_op(&gobn_ops[i], status);
    register_kernels(&gobn_ops[i], status);
  }
  TF_DeleteStatus(status);
}
