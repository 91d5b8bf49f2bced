// The assertions by which params_gen.h holds gobn_params laid out as the Go
// struct it mirrors (cudaspec.Params), in cgo's C compiler and in NVRTC
// alike: GOBN_PARAMS_OFFSET(f), a field's offset as a constant, and
// GOBN_PARAMS_ASSERT(cond), a static assertion in C and in C++.
#ifndef GOBN_KERNELS_CUDA_LAYOUT_ASSERT_H_
#define GOBN_KERNELS_CUDA_LAYOUT_ASSERT_H_

// NVRTC (__CUDACC_RTC__) has no __builtin_offsetof, nor an offsetof that
// is a constant; its front end's __INTADDR__ gives the offset as one.
#if defined(__CUDACC_RTC__)
#define GOBN_PARAMS_OFFSET(f) __INTADDR__(&((gobn_params*)0)->f)
#else
#define GOBN_PARAMS_OFFSET(f) __builtin_offsetof(gobn_params, f)
#endif
#ifdef __cplusplus
#define GOBN_PARAMS_ASSERT(cond) static_assert(cond, #cond)
#else
#define GOBN_PARAMS_ASSERT(cond) _Static_assert(cond, #cond)
#endif

#endif  // GOBN_KERNELS_CUDA_LAYOUT_ASSERT_H_
