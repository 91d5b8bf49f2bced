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

TF_Code gobn_allocate(TF_OpKernelContext* ctx, int i, TF_DataType dtype, const int64_t* dims, int ndims,
                      size_t bytes, gobn_tensor* out, TF_Status* status) {
  out->tensor = NULL;
  TF_Tensor* t = TF_AllocateOutput(ctx, i, dtype, dims, ndims, bytes, status);
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

void gobn_delete_tensors(TF_Tensor* const* ts, int n) {
  for (int i = 0; i < n; i++) {
    TF_DeleteTensor(ts[i]);
  }
}
