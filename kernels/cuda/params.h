// gobn_params is the one argument of every gobn CUDA kernel, passed by value:
// the Go launch layer (launch_cuda.go) fills it in, the kernels
// (batchnorm.cu) read it. One definition for both sides. Device addresses
// are integers (CUdeviceptr), which Go may hold in its own memory.
#ifndef GOBN_KERNELS_CUDA_PARAMS_H_
#define GOBN_KERNELS_CUDA_PARAMS_H_

typedef unsigned long long gobn_ptr;

typedef struct {
  // Activation tensors: N·C·S elements of T in the launch's layout. dx may
  // be dy or x itself.
  gobn_ptr dy;
  gobn_ptr x;
  gobn_ptr dx;
  // Per-channel inputs, C elements: float, or T for the global-normalization
  // gradient. mean is μ; scale is scale (γ); var is the variance, or the
  // inverse standard deviation where the finalize kernel says so.
  gobn_ptr mean;
  gobn_ptr scale;
  gobn_ptr var;
  // BatchNormGradApply's global sums, float [C].
  gobn_ptr sum_dy;
  gobn_ptr sum_dy_xmu;
  // Workspace: partial sums, double [splits][2][C] (Σdy, then Σdy·(x−μ));
  // and the apply pass's coefficients, float [3][C] (A, B, mean of dy).
  gobn_ptr partial;
  gobn_ptr coef;
  // Per-channel outputs, C elements each, in the finalize kernel's order.
  gobn_ptr out[5];
  long long n, c, s;
  // R, the element count the coefficients divide by.
  long long count;
  // Partial sums per channel in partial (0: the sums are zero).
  int splits;
  float epsilon;
  int scale_after_normalization;
} gobn_params;

#endif  // GOBN_KERNELS_CUDA_PARAMS_H_
