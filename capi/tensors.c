// Batched access to a running kernel's tensors: every call from Go into C
// costs the Go runtime a system-call transition, and reading a tensor field by
// field took about ten of them per tensor.
#include "gobn.h"

static void describe(TF_Tensor* t, gobn_tensor* d) {
  d->tensor = t;
  d->data = TF_TensorData(t);
  d->bytes = TF_TensorByteSize(t);
  d->dtype = (int)TF_TensorType(t);
  d->ndims = TF_NumDims(t);
  for (int i = 0; i < d->ndims && i < GOBN_INLINE_DIMS; i++) {
    d->dims[i] = TF_Dim(t, i);
  }
}

TF_Code gobn_inputs(TF_OpKernelContext* ctx, gobn_tensor* out, int cap, int* total, int* fetched,
                    TF_Status* status) {
  int n = TF_NumInputs(ctx);
  *total = n;
  *fetched = 0;
  if (n > cap) {
    n = cap;
  }
  for (int i = 0; i < n; i++) {
    TF_Tensor* t = NULL;
    TF_GetInput(ctx, i, &t, status);
    TF_Code code = TF_GetCode(status);
    if (code != TF_OK) {
      if (t != NULL) {
        TF_DeleteTensor(t);
      }
      return code;
    }
    describe(t, &out[i]);
    *fetched = i + 1;
  }
  return TF_OK;
}

// take_output describes the output t just allocated into *out, or deletes it
// if status reports a failure, and returns the status code.
static TF_Code take_output(TF_Tensor* t, gobn_tensor* out, TF_Status* status) {
  TF_Code code = TF_GetCode(status);
  if (code != TF_OK) {
    if (t != NULL) {
      TF_DeleteTensor(t);
    }
    return code;
  }
  describe(t, out);
  return TF_OK;
}

TF_Code gobn_allocate(TF_OpKernelContext* ctx, int i, TF_DataType dtype, const int64_t* dims, int ndims,
                      size_t bytes, gobn_tensor* out, TF_Status* status) {
  out->tensor = NULL;
  return take_output(TF_AllocateOutput(ctx, i, dtype, dims, ndims, bytes, status), out, status);
}

TF_Code gobn_forward_or_allocate(TF_OpKernelContext* ctx, int i, TF_Tensor** inputs, unsigned candidates,
                                 const int64_t* dims, int ndims, gobn_tensor* out, TF_Status* status) {
  out->tensor = NULL;
  // TensorFlow forwards only a buffer that nothing else references: the
  // kernel's own references to the candidates go first. The inputs stay
  // alive, held by the kernel's context until the kernel returns.
  int list[32];
  int n = 0;
  for (int k = 0; k < 32; k++) {
    if ((candidates >> k) & 1u) {
      list[n++] = k;
      if (inputs[k] != NULL) {
        TF_DeleteTensor(inputs[k]);
        inputs[k] = NULL;
      }
    }
  }
  return take_output(TF_ForwardInputOrAllocateOutput(ctx, list, n, i, dims, ndims, NULL, status), out, status);
}

void gobn_delete_tensors(TF_Tensor* const* ts, int n) {
  for (int i = 0; i < n; i++) {
    if (ts[i] != NULL) {  // NULL: an input given up by gobn_forward_or_allocate
      TF_DeleteTensor(ts[i]);
    }
  }
}

TF_Code gobn_allocate_temp(TF_OpKernelContext* ctx, int64_t bytes, gobn_tensor* out, TF_Status* status) {
  out->tensor = NULL;
  TF_AllocatorAttributes attrs = {TF_ALLOCATOR_ATTRIBUTES_STRUCT_SIZE, 0};  // device memory
  return take_output(TF_AllocateTemp(ctx, TF_UINT8, &bytes, 1, &attrs, status), out, status);
}
