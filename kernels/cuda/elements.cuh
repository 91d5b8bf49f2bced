// Element types and vector access for gobn's CUDA kernels.
//
// half and bfloat16 are carried as their 16 bits (f16, bf16) and converted
// with PTX (cvt for half; for bfloat16 to float, a mov of its bits into the
// float's high half) or bit arithmetic (float to bfloat16), so the kernels
// need no CUDA header and convert alike on every architecture. Arithmetic
// is float.
#ifndef GOBN_KERNELS_CUDA_ELEMENTS_CUH_
#define GOBN_KERNELS_CUDA_ELEMENTS_CUH_

struct f16 {
  unsigned short bits;
};
struct bf16 {
  unsigned short bits;
};

__device__ __forceinline__ float to_float(float v) { return v; }

__device__ __forceinline__ float to_float(f16 v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
  return f;
}

__device__ __forceinline__ float to_float(bf16 v) {
  float f;
  asm("mov.b32 %0, {0, %1};" : "=f"(f) : "h"(v.bits));
  return f;
}

template <typename T>
__device__ __forceinline__ T from_float(float v);

template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}

// Round to nearest, ties to even, as TensorFlow's Eigen::half.
template <>
__device__ __forceinline__ f16 from_float<f16>(float v) {
  f16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(v));
  return h;
}

// Round to nearest, ties to even, as TensorFlow's bfloat16; a NaN stays a
// quiet NaN of the same sign.
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float v) {
  unsigned int u = __float_as_uint(v);
  bf16 b;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    b.bits = static_cast<unsigned short>((u >> 16) | 0x0040u);
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);
    b.bits = static_cast<unsigned short>(u >> 16);
  }
  return b;
}

// raw<B>::type is an integer (vector) type of B bytes, B in {2, 4, 8, 16}:
// one load or store instruction of that width.
template <int B>
struct raw;
template <>
struct raw<2> {
  typedef unsigned short type;
};
template <>
struct raw<4> {
  typedef unsigned int type;
};
template <>
struct raw<8> {
  typedef uint2 type;
};
template <>
struct raw<16> {
  typedef uint4 type;
};

// load reads the V elements at p (aligned to V·sizeof(T) bytes) in one
// instruction and converts them to float.
template <typename T, int V>
__device__ __forceinline__ void load(const T* p, float (&out)[V]) {
  typedef typename raw<sizeof(T) * V>::type R;
  union {
    R r;
    T e[V];
  } u;
  u.r = *reinterpret_cast<const R*>(p);
#pragma unroll
  for (int v = 0; v < V; v++) out[v] = to_float(u.e[v]);
}

// load_rows reads dy and x at U rows of C elements, step rows apart from row
// r, V elements from column c0 of each: one row's vector per unrolled slot.
template <typename T, int V, int U>
__device__ __forceinline__ void load_rows(const T* dy, const T* x, long long r, long long step, long long C,
                                          long long c0, float (&d)[U][V], float (&xv)[U][V]) {
#pragma unroll
  for (int u = 0; u < U; u++) {
    const long long off = (r + u * step) * C + c0;
    load<T, V>(dy + off, d[u]);
    load<T, V>(x + off, xv[u]);
  }
}

// store rounds the V floats to T and writes them at p in one instruction.
template <typename T, int V>
__device__ __forceinline__ void store(T* p, const float (&in)[V]) {
  typedef typename raw<sizeof(T) * V>::type R;
  union {
    R r;
    T e[V];
  } u;
#pragma unroll
  for (int v = 0; v < V; v++) u.e[v] = from_float<T>(in[v]);
  *reinterpret_cast<R*>(p) = u.r;
}

#endif  // GOBN_KERNELS_CUDA_ELEMENTS_CUH_
