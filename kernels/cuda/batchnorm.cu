// gobn's batch-normalization gradients on NVIDIA GPUs.
//
// Every op is built from three kinds of kernel, all taking one gobn_params
// (params_gen.h):
//
//   reduce    per-channel partial sums Σdy and Σdy·(x−μ) over a slice of
//             the rows, one pair per block, into the workspace (double);
//             the sweep variants also write x_backprop = dy·A[c], for the
//             gradients whose x_backprop does not depend on the sums
//             (inference, global normalization): x and dy are read once.
//   finalize  adds each channel's partial sums in a fixed order (the result
//             does not depend on scheduling), and forms the 1-D outputs and
//             the apply pass's coefficients.
//   apply     x_backprop = A[c]·(dy − M[c]) + B[c]·(x − μ[c]).
//
// Which kernels there are, each with its element type T, vector width V and
// rows a step U, is the table of kernels/cuda (the shared passes', and each
// kind's beside its launch): kernels_gen.cuh lists them (GOBN_KERNELS), and
// the end of this file defines them.
//
// FusedBatchNormGradEx runs the same passes on dz, the gradient masked by
// the activation's derivative where dy is loaded (Masked), and its sweep
// and apply passes write dz as side_input_backprop where it is asked for.
//
// The training gradient (FusedBatchNormGrad*, is_training) is reduce,
// finalize, apply: x and dy are read twice, and where they fit in L2 the
// second read comes from it. With R = N·S elements per channel and
// c = 1/sqrt(σ²+ε) (on GPU the forward pass saves c itself):
//
//   offset_backprop = Σ dy
//   scale_backprop  = c · Σ dy·(x−μ)
//   x_backprop      = scale·c · (dy − Σdy/R − (x−μ)·c²·Σdy·(x−μ)/R)
//                   = A·(dy − M) + B·(x − μ),  A = scale·c, M = Σdy/R,
//                                              B = −A·c²·Σdy·(x−μ)/R
//
// Layouts are read in place. Channels last (NHWC, NDHWC: element (r, c) at
// r·C + c, r < R) runs a 2-D block: threadIdx.x over vectors of V adjacent
// channels, threadIdx.y over rows, so a warp reads whole consecutive rows
// and each thread keeps its channels' terms in registers. Channels first
// (NCHW, NCDHW: element (n, c, s) at (n·C + c)·S + s) runs one channel per
// blockIdx.x, threadIdx.x over vectors of V adjacent s, threadIdx.y over n,
// blockIdx.y and blockIdx.z splitting n and s. The launch layer (plan.go)
// chooses V (16-byte loads where alignment allows, else narrower, down to
// scalars), the block and the grid; the kernels take any of them.
//
// Accuracy: a thread sums at most 16 elements of a channel per step in float
// and adds each step's sums to double accumulators; blocks and the finalize kernel add in
// double, so the sums are as good as the CPU path's float64 ones up to the
// rounding of short float runs. Offsets are 64-bit: tensors over 2^31
// elements work.

#include "elements.cuh"
#include "kernels_gen.cuh"
#include "params_gen.h"

namespace {

// Blocks of kThreads per multiprocessor every kernel must fit (so at most 128
// registers a thread): with ptxas' own register choice a few kernels spilled
// (python_tests/test_cuda_build.py checks that none does).
constexpr int kMinBlocks = 2;

// at returns the device address a as a T*.
template <typename T>
__device__ __forceinline__ T* at(gobn_ptr a) {
  return reinterpret_cast<T*>(a);
}

// What a reduce kernel does besides the sums.
enum Mode {
  kSums,   // nothing: the training gradient and BatchNormGradReduce
  kSweep,  // x_backprop = dy·scale·(1/sqrt(var+ε)): inference
  kGlobal  // dx = dy·(1/sqrt(v+ε))·(γ or 1): global normalization
};

__device__ __forceinline__ double inv_std(double variance, float epsilon) {
  return 1.0 / sqrt(variance + static_cast<double>(epsilon));
}

// channel_terms reads channel c's mean μ and, for the sweeps, the factor A
// of x_backprop = dy·A. P is the per-channel inputs' type.
template <typename P, Mode M>
__device__ __forceinline__ void channel_terms(const gobn_params& p, long long c, float& mu, float& a) {
  mu = to_float(at<const P>(p.mean)[c]);
  a = 0.f;
  if (M == kSweep) {
    double k = inv_std(to_float(at<const P>(p.var)[c]), p.epsilon);
    a = static_cast<float>(static_cast<double>(to_float(at<const P>(p.scale)[c])) * k);
  } else if (M == kGlobal) {
    double k = inv_std(to_float(at<const P>(p.var)[c]), p.epsilon);
    if (p.flags & kScaleAfterNormalization) k *= to_float(at<const P>(p.scale)[c]);
    a = static_cast<float>(k);
  }
}

// The gradient a pass reads where it loads dy (its template argument G):
// dy itself (Plain), or FusedBatchNormGradEx's dz (Masked), which the
// sweep and apply passes also write as side_input_backprop.
struct Plain {
  template <typename T, int V>
  __device__ __forceinline__ static void grad(const gobn_params&, long long, float (&)[V]) {}
  template <typename T, int V>
  __device__ __forceinline__ static void side(const gobn_params&, long long, const float (&)[V]) {}
};

// Masked is FusedBatchNormGradEx's gradient of the activation's input from
// that of its output, as stock's ReluGrad and Relu6Grad form it from the
// activation's output y (p.tensors[Y]): dz = dy·m, m = 1 where 0 < y (kRelu),
// 0 < y < 6 (kRelu6), always (neither), else 0, so that a NaN or infinite
// dy masked off is NaN. side writes dz at p.tensors[Side] where kSideInput
// asks for it (Side < 0: the pass writes none). Plain loop it equals:
// dz[i] = dy[i]·m(y[i]); side_input_backprop[i] = dz[i].
template <int Y, int Side>
struct Masked {
  template <typename T, int V>
  __device__ __forceinline__ static void grad(const gobn_params& p, long long off, float (&d)[V]) {
    if (!(p.flags & (kRelu | kRelu6))) return;
    float y[V];
    load<T, V>(at<const T>(p.tensors[Y]) + off, y);
#pragma unroll
    for (int v = 0; v < V; v++) {
      const bool on = y[v] > 0.f && (!(p.flags & kRelu6) || y[v] < 6.f);
      d[v] *= on ? 1.f : 0.f;
    }
  }
  template <typename T, int V>
  __device__ __forceinline__ static void side(const gobn_params& p, long long off, const float (&d)[V]) {
    if (Side >= 0 && (p.flags & kSideInput)) store<T, V>(at<T>(p.tensors[Side < 0 ? 0 : Side]) + off, d);
  }
};

__device__ __forceinline__ int pow2_ceil(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

// tree_sum adds sh[k][base + j·stride] over j < count into sh[k][base], for
// each of the K arrays, by the threads whose index j (their part) is below
// count. Every thread of the block calls it.
template <int K>
__device__ __forceinline__ void tree_sum(double (*sh)[kThreads], int base, int stride, int j, int count) {
  __syncthreads();
  for (int off = pow2_ceil(count) >> 1; off > 0; off >>= 1) {
    if (j < off && j + off < count) {
#pragma unroll
      for (int k = 0; k < K; k++) sh[k][base] += sh[k][base + off * stride];
    }
    __syncthreads();
  }
}

// block_partials adds the sums sdy (Σdy) and sdx (Σdy·(x−μ)) of the V
// channels from c0 over the block's thread rows (threadIdx.y) in sh, and
// thread row 0 writes them as split's partial sums of those channels,
// where active (c0 < C). Every thread of the block calls it.
template <int V, typename A>
__device__ __forceinline__ void block_partials(double (*sh)[kThreads], const gobn_params& p, long long split,
                                               long long c0, bool active, const A (&sdy)[V], const A (&sdx)[V]) {
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
  for (int v = 0; v < V; v++) {
    sh[v][tid] = sdy[v];
    sh[V + v][tid] = sdx[v];
  }
  tree_sum<2 * V>(sh, tid, blockDim.x, threadIdx.y, blockDim.y);
  if (threadIdx.y == 0 && active) {
    double* partial = at<double>(p.partial) + split * 2 * p.c + c0;
#pragma unroll
    for (int v = 0; v < V; v++) {
      partial[v] = sh[v][tid];
      partial[p.c + v] = sh[V + v][tid];
    }
  }
}

// reduce_cl is the reduce kernel for channels last. Plain loop it equals,
// for each channel c: sum_dy = Σ_r dy[r·C+c], sum_dy_xmu = Σ_r dy[r·C+c]·(x[r·C+c]−μ[c]),
// and for the sweeps dx[r·C+c] = dy[r·C+c]·A[c].
// Launch: block (tx, ty), tx·V channels by ty rows; grid (⌈C/(V·tx)⌉, splits).
// U: rows a thread loads per unrolled step. G: the gradient read where dy
// is loaded (Plain, Masked).
template <typename T, typename P, int V, Mode M, int U, typename G = Plain>
__device__ __forceinline__ void reduce_cl(const gobn_params& p) {
  __shared__ double sh[2 * V][kThreads];
  const long long C = p.c;
  const long long R = p.n * p.s;
  const long long c0 = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  const bool active = c0 < C;
  const T* dy = at<const T>(p.dy);
  const T* x = at<const T>(p.x);
  T* dx = at<T>(p.dx);
  float mu[V], a[V];
  double sdy[V], sdx[V];
#pragma unroll
  for (int v = 0; v < V; v++) {
    sdy[v] = 0;
    sdx[v] = 0;
    mu[v] = 0.f;
    a[v] = 0.f;
    if (active) channel_terms<P, M>(p, c0 + v, mu[v], a[v]);
  }
  const long long step = static_cast<long long>(gridDim.y) * blockDim.y;
  long long r = static_cast<long long>(blockIdx.y) * blockDim.y + threadIdx.y;
  if (active) {
    for (; r + (U - 1) * step < R; r += U * step) {
      float d[U][V], xv[U][V];
      load_rows<T, V, U>(dy, x, r, step, C, c0, d, xv);
#pragma unroll
      for (int u = 0; u < U; u++) G::template grad<T, V>(p, (r + u * step) * C + c0, d[u]);
      float gdy[V], gdx[V];
#pragma unroll
      for (int v = 0; v < V; v++) {
        gdy[v] = 0.f;
        gdx[v] = 0.f;
      }
#pragma unroll
      for (int u = 0; u < U; u++) {
#pragma unroll
        for (int v = 0; v < V; v++) {
          gdy[v] += d[u][v];
          gdx[v] = fmaf(d[u][v], xv[u][v] - mu[v], gdx[v]);
        }
        if (M != kSums) {
          float o[V];
#pragma unroll
          for (int v = 0; v < V; v++) o[v] = d[u][v] * a[v];
          store<T, V>(dx + (r + u * step) * C + c0, o);
          G::template side<T, V>(p, (r + u * step) * C + c0, d[u]);
        }
      }
#pragma unroll
      for (int v = 0; v < V; v++) {
        sdy[v] += gdy[v];
        sdx[v] += gdx[v];
      }
    }
    for (; r < R; r += step) {
      const long long off = r * C + c0;
      float d[V], xv[V];
      load<T, V>(dy + off, d);
      load<T, V>(x + off, xv);
      G::template grad<T, V>(p, off, d);
#pragma unroll
      for (int v = 0; v < V; v++) {
        sdy[v] += d[v];
        sdx[v] += static_cast<double>(d[v] * (xv[v] - mu[v]));
      }
      if (M != kSums) {
        float o[V];
#pragma unroll
        for (int v = 0; v < V; v++) o[v] = d[v] * a[v];
        store<T, V>(dx + off, o);
        G::template side<T, V>(p, off, d);
      }
    }
  }
  block_partials<V>(sh, p, blockIdx.y, c0, active, sdy, sdx);
}

// cf_cursor walks one thread's elements of a channel in channels first: the
// vectors s = s0, s0 + sstep, ... below SV of each n = n0, n0 + nstep, ...
// below N. Walking (n, s) as one sequence lets a thread keep U loads in
// flight whether S is long (many s per n) or short (one s per n, as in 7×7).
struct cf_cursor {
  long long n, s;
  long long s0, sstep, nstep, SV, N, C, S, c;

  __device__ __forceinline__ cf_cursor(const gobn_params& p, int V) {
    C = p.c;
    S = p.s;
    N = p.n;
    SV = S / V;
    c = blockIdx.x;
    s0 = static_cast<long long>(blockIdx.z) * blockDim.x + threadIdx.x;
    sstep = static_cast<long long>(gridDim.z) * blockDim.x;
    nstep = static_cast<long long>(gridDim.y) * blockDim.y;
    s = s0;
    n = s0 < SV ? static_cast<long long>(blockIdx.y) * blockDim.y + threadIdx.y : N;
  }
  __device__ __forceinline__ bool valid() const { return n < N; }
  // offset returns the element offset of the current vector (V elements).
  __device__ __forceinline__ long long offset(int V) const { return (n * C + c) * S + s * V; }
  __device__ __forceinline__ void next() {
    s += sstep;
    if (s >= SV) {
      s = s0;
      n += nstep;
    }
  }

  // load claims the next U vectors and loads their dy and x into d and xv,
  // with their offsets; a slot past the end (ok false) is left as it is, or
  // zeroed where Zero is set (a reduction adds every slot).
  template <typename T, int V, int U, bool Zero>
  __device__ __forceinline__ void load(const T* dy, const T* x, long long (&off)[U], bool (&ok)[U],
                                       float (&d)[U][V], float (&xv)[U][V]) {
#pragma unroll
    for (int u = 0; u < U; u++) {
      ok[u] = valid();
      off[u] = offset(V);
      if (ok[u]) next();
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      if (ok[u]) {
        ::load<T, V>(dy + off[u], d[u]);
        ::load<T, V>(x + off[u], xv[u]);
      } else if (Zero) {
#pragma unroll
        for (int v = 0; v < V; v++) {
          d[u][v] = 0.f;
          xv[u][v] = 0.f;
        }
      }
    }
  }
};

// reduce_cf is the reduce kernel for channels first. Plain loop it equals,
// for each channel c: sum_dy = Σ_n Σ_s dy[(n·C+c)·S+s],
// sum_dy_xmu = Σ_n Σ_s dy[(n·C+c)·S+s]·(x[(n·C+c)·S+s]−μ[c]), and for the
// sweep dx[(n·C+c)·S+s] = dy[(n·C+c)·S+s]·A[c].
// Launch: block (tx, ty), tx vectors of s by ty values of n; grid
// (C, splits of n, splits of s). U: row pieces (vectors) a thread loads per
// unrolled step. G: as reduce_cl's.
template <typename T, typename P, int V, Mode M, int U, typename G = Plain>
__device__ __forceinline__ void reduce_cf(const gobn_params& p) {
  __shared__ double sh[2][kThreads];
  const T* dy = at<const T>(p.dy);
  const T* x = at<const T>(p.x);
  T* dx = at<T>(p.dx);
  cf_cursor cur(p, V);
  float mu, a;
  channel_terms<P, M>(p, cur.c, mu, a);
  double sdy = 0, sdx = 0;
  while (cur.valid()) {
    long long off[U];
    bool ok[U];
    float d[U][V], xv[U][V];
    cur.load<T, V, U, true>(dy, x, off, ok, d, xv);
#pragma unroll
    for (int u = 0; u < U; u++) {
      if (ok[u]) G::template grad<T, V>(p, off[u], d[u]);
    }
    float gdy = 0.f, gdx = 0.f;
#pragma unroll
    for (int u = 0; u < U; u++) {
#pragma unroll
      for (int v = 0; v < V; v++) {
        gdy += d[u][v];
        gdx = fmaf(d[u][v], xv[u][v] - mu, gdx);
      }
      if (M != kSums && ok[u]) {
        float o[V];
#pragma unroll
        for (int v = 0; v < V; v++) o[v] = d[u][v] * a;
        store<T, V>(dx + off[u], o);
        G::template side<T, V>(p, off[u], d[u]);
      }
    }
    sdy += gdy;
    sdx += gdx;
  }
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  sh[0][tid] = sdy;
  sh[1][tid] = sdx;
  tree_sum<2>(sh, tid, 1, tid, blockDim.x * blockDim.y);
  if (tid == 0) {
    const long long split = static_cast<long long>(blockIdx.y) * gridDim.z + blockIdx.z;
    at<double>(p.partial)[(split * 2) * cur.C + cur.c] = sh[0][0];
    at<double>(p.partial)[(split * 2 + 1) * cur.C + cur.c] = sh[1][0];
  }
}

// apply_cl writes x_backprop for channels last. Plain loop it equals:
// dx[r·C+c] = A[c]·(dy[r·C+c] − M[c]) + B[c]·(x[r·C+c] − μ[c]), with A, B, M
// the rows of coef. Launch as reduce_cl. G: as reduce_cl's (dy is its
// gradient).
template <typename T, int V, int U, typename G = Plain>
__device__ __forceinline__ void apply_cl(const gobn_params& p) {
  const long long C = p.c;
  const long long R = p.n * p.s;
  const long long c0 = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (c0 >= C) return;
  const T* dy = at<const T>(p.dy);
  const T* x = at<const T>(p.x);
  T* dx = at<T>(p.dx);
  const float* mean = at<const float>(p.mean);
  float A[V], B[V], Md[V], mu[V];
#pragma unroll
  for (int v = 0; v < V; v++) {
    A[v] = at<float>(p.coef)[c0 + v];
    B[v] = at<float>(p.coef)[C + c0 + v];
    Md[v] = at<float>(p.coef)[2 * C + c0 + v];
    mu[v] = mean[c0 + v];
  }
  const long long step = static_cast<long long>(gridDim.y) * blockDim.y;
  long long r = static_cast<long long>(blockIdx.y) * blockDim.y + threadIdx.y;
  for (; r + (U - 1) * step < R; r += U * step) {
    float d[U][V], xv[U][V];
    load_rows<T, V, U>(dy, x, r, step, C, c0, d, xv);
#pragma unroll
    for (int u = 0; u < U; u++) {
      G::template grad<T, V>(p, (r + u * step) * C + c0, d[u]);
      float o[V];
#pragma unroll
      for (int v = 0; v < V; v++) o[v] = fmaf(A[v], d[u][v] - Md[v], B[v] * (xv[u][v] - mu[v]));
      store<T, V>(dx + (r + u * step) * C + c0, o);
      G::template side<T, V>(p, (r + u * step) * C + c0, d[u]);
    }
  }
  for (; r < R; r += step) {
    const long long off = r * C + c0;
    float d[V], xv[V], o[V];
    load<T, V>(dy + off, d);
    load<T, V>(x + off, xv);
    G::template grad<T, V>(p, off, d);
#pragma unroll
    for (int v = 0; v < V; v++) o[v] = fmaf(A[v], d[v] - Md[v], B[v] * (xv[v] - mu[v]));
    store<T, V>(dx + off, o);
    G::template side<T, V>(p, off, d);
  }
}

// apply_cf writes x_backprop for channels first, as apply_cl. Launch as
// reduce_cf.
template <typename T, int V, int U, typename G = Plain>
__device__ __forceinline__ void apply_cf(const gobn_params& p) {
  const T* dy = at<const T>(p.dy);
  const T* x = at<const T>(p.x);
  T* dx = at<T>(p.dx);
  cf_cursor cur(p, V);
  const long long C = cur.C, c = cur.c;
  const float A = at<float>(p.coef)[c], B = at<float>(p.coef)[C + c], Md = at<float>(p.coef)[2 * C + c];
  const float mu = at<const float>(p.mean)[c];
  while (cur.valid()) {
    long long off[U];
    bool ok[U];
    float d[U][V], xv[U][V];
    cur.load<T, V, U, false>(dy, x, off, ok, d, xv);
#pragma unroll
    for (int u = 0; u < U; u++) {
      if (ok[u]) {
        G::template grad<T, V>(p, off[u], d[u]);
        float o[V];
#pragma unroll
        for (int v = 0; v < V; v++) o[v] = fmaf(A, d[u][v] - Md, B * (xv[u][v] - mu));
        store<T, V>(dx + off[u], o);
        G::template side<T, V>(p, off[u], d[u]);
      }
    }
  }
}

// The finalize kernels run blocks of (kLanes, kSplitLanes): threadIdx.x over
// kLanes adjacent channels, threadIdx.y over the splits, so that a block's
// loads of one split are one coalesced run and each thread adds a fraction
// of the splits. Grid: ⌈C/kLanes⌉ blocks.

// channel_sums adds channel c's partial sums: each thread those of splits
// threadIdx.y, threadIdx.y + kSplitLanes, ..., then the block's threads of
// one channel in a fixed tree, so the result does not depend on scheduling.
// Every thread of the block calls it; thread y = 0 of each channel gets the
// sums.
__device__ __forceinline__ void channel_sums(const gobn_params& p, long long c, double& sdy, double& sdx) {
  __shared__ double sh[2][kThreads];
  sdy = 0;
  sdx = 0;
  if (c < p.c) {
    const double* partial = at<const double>(p.partial);
#pragma unroll 4
    for (long long k = threadIdx.y; k < p.splits; k += kSplitLanes) {
      sdy += partial[(2 * k) * p.c + c];
      sdx += partial[(2 * k + 1) * p.c + c];
    }
  }
  const int tid = threadIdx.y * kLanes + threadIdx.x;
  sh[0][tid] = sdy;
  sh[1][tid] = sdx;
  tree_sum<2>(sh, tid, kLanes, threadIdx.y, kSplitLanes);
  sdy = sh[0][threadIdx.x];
  sdx = sh[1][threadIdx.x];
}

// coefficients writes the apply pass's A, B and M of channel c, for
// c = 1/sqrt(σ²+ε) given as inv.
__device__ __forceinline__ void coefficients(const gobn_params& p, long long c, double inv, double sdy, double sdx) {
  const double R = static_cast<double>(p.count);
  const double a = static_cast<double>(at<const float>(p.scale)[c]) * inv;
  at<float>(p.coef)[c] = static_cast<float>(a);
  at<float>(p.coef)[p.c + c] = static_cast<float>(-a * inv * inv * sdx / R);
  at<float>(p.coef)[2 * p.c + c] = static_cast<float>(sdy / R);
}

__device__ __forceinline__ long long channel_index() {
  return static_cast<long long>(blockIdx.x) * kLanes + threadIdx.x;
}

// global_finalize forms BatchNormWithGlobalNormalizationGrad's 1-D outputs
// dm, dv, db and dg: with s = 1/sqrt(v+ε) and γ' = γ or 1,
// db = Σdy, dm = −db·s·γ', dg = s·Σdy·(t−m) (or 0), dv = −½·s³·γ'·Σdy·(t−m).
template <typename T>
__device__ __forceinline__ void global_finalize(const gobn_params& p) {
  const long long c = channel_index();
  double sdy, sdx;
  channel_sums(p, c, sdy, sdx);
  if (c >= p.c || threadIdx.y != 0) return;
  const double s = inv_std(to_float(at<const T>(p.var)[c]), p.epsilon);
  double k = s, dg = 0;
  if (p.flags & kScaleAfterNormalization) {
    k *= to_float(at<const T>(p.scale)[c]);
    dg = s * sdx;
  }
  at<T>(p.out[out::finalize_global::dm])[c] = from_float<T>(static_cast<float>(-sdy * k));
  at<T>(p.out[out::finalize_global::dv])[c] = from_float<T>(static_cast<float>(-0.5 * s * s * k * sdx));
  at<T>(p.out[out::finalize_global::db])[c] = from_float<T>(static_cast<float>(sdy));
  at<T>(p.out[out::finalize_global::dg])[c] = from_float<T>(static_cast<float>(dg));
}

// The training gradient: var is reserve_space_2, the inverse standard
// deviation; out: scale_backprop, offset_backprop; coef for apply.
__device__ __forceinline__ void finalize_train(const gobn_params& p) {
  const long long c = channel_index();
  double sdy, sdx;
  channel_sums(p, c, sdy, sdx);
  if (c >= p.c || threadIdx.y != 0) return;
  const double inv = at<const float>(p.var)[c];
  at<float>(p.out[out::finalize_train::scale_backprop])[c] = static_cast<float>(sdx * inv);
  at<float>(p.out[out::finalize_train::offset_backprop])[c] = static_cast<float>(sdy);
  coefficients(p, c, inv, sdy, sdx);
}

// The inference gradient: var is the population variance; out:
// scale_backprop, offset_backprop (x_backprop is the sweep's).
__device__ __forceinline__ void finalize_infer(const gobn_params& p) {
  const long long c = channel_index();
  double sdy, sdx;
  channel_sums(p, c, sdy, sdx);
  if (c >= p.c || threadIdx.y != 0) return;
  const double inv = inv_std(at<const float>(p.var)[c], p.epsilon);
  at<float>(p.out[out::finalize_infer::scale_backprop])[c] = static_cast<float>(sdx * inv);
  at<float>(p.out[out::finalize_infer::offset_backprop])[c] = static_cast<float>(sdy);
}

// BatchNormGradReduce: out: sum_dy, sum_dy_xmu.
__device__ __forceinline__ void finalize_reduce(const gobn_params& p) {
  const long long c = channel_index();
  double sdy, sdx;
  channel_sums(p, c, sdy, sdx);
  if (c >= p.c || threadIdx.y != 0) return;
  at<float>(p.out[out::finalize_reduce::sum_dy])[c] = static_cast<float>(sdy);
  at<float>(p.out[out::finalize_reduce::sum_dy_xmu])[c] = static_cast<float>(sdx);
}

// BatchNormGradApply: coef from the global sums sum_dy, sum_dy_xmu, the
// variance var and R = count.
__device__ __forceinline__ void finalize_apply(const gobn_params& p) {
  const long long c = channel_index();
  if (c >= p.c || threadIdx.y != 0) return;
  const double inv = inv_std(at<const float>(p.var)[c], p.epsilon);
  coefficients(p, c, inv, at<const float>(p.sum_dy)[c], at<const float>(p.sum_dy_xmu)[c]);
}

}  // namespace

// The kernels, one a row of kernels/cuda's table (kernels_gen.cuh): each
// calls its job's device function with its T, V and U.
#define GOBN_KERNEL(name, body) \
  extern "C" __global__ void __launch_bounds__(kThreads, kMinBlocks) name(gobn_params p) { body; }

GOBN_KERNELS(GOBN_KERNEL)
