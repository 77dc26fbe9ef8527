// strata-header: cuda-only
// strata CUDA backend: the kernel set of host/kernels.hpp and host/gemm.hpp.
//
// Same names, argument order and semantics as the host kernels, with a
// cuda::queue& first and device pointers; the executor reaches them by
// argument-dependent lookup on the queue type. Everything is enqueued on the
// queue's stream and returns without waiting, EXCEPT (each says so):
//   sum, sum_squares, all_finite   return a host value: they synchronize q;
//   check_ids                      validates on the device, then synchronizes;
//   raise_device_errors            reads the queue's error word: synchronizes.
// None of those may be called inside CUDA Graph capture.
//
// Invalid labels/ids. The host kernels throw std::out_of_range before
// writing anything; a device kernel cannot without a sync. Here a kernel that
// meets a label outside its range never reads out of bounds: it writes NaN
// into that row's outputs and records the first offender (lowest row) in the
// queue's error word. raise_device_errors(q) (one sync, e.g. once per step
// where the loss is read back anyway) throws the same std::out_of_range the
// host would have. check_ids is the synchronous up-front check.
//
// Types. T is the element type of activations and parameters: float,
// double or bf16 (strata::bf16, shared with the host backend and cuBLASLt's
// CUDA_R_16BF). bf16 is a storage type: a kernel loads it, computes in float
// (compute_t<bf16>) and rounds its bf16 outputs to nearest even. Mixed
// precision gives the per-row statistics (S: softmax max / sum-exp / loss,
// LayerNorm mean / rstd) and the parameter gradients (G: bias_grad,
// layernorm dgamma / dbeta, embedding_backward) their own real type, so a
// bf16 step writes float statistics and float master gradients; for float
// and double data S = G = T is deduced from the pointers. cast_elements
// converts between the three (the bf16 copies of the master weights).
//
// Numerics follow the host backend: elementwise work in compute_t<T> (T for
// float/double, float for bf16), long reductions (row statistics, softmax
// denominators, column sums, whole-tensor sums) accumulate in double. The
// device's expf/tanhf differ from libm by an ulp or two, so results agree
// with the host to rounding, not bit for bit (bf16 outputs: to one bf16
// ulp). Copies and cast_elements are bit-identical to the host (a NaN stays
// a NaN, its payload may differ). FMA contraction is on (nvcc's default).
//
// Determinism: no floating-point atomics. Row reductions use fixed shuffle
// trees; column reductions (bias_grad, layernorm dgamma/dbeta) write
// per-chunk partials whose chunking depends only on the shape, then sum them
// in chunk order; embedding_backward stably sorts (id, row) pairs and adds
// each id's rows in row order (bit-identical to the host); sum/sum_squares
// use CUB's run-to-run deterministic reduction. Repeated runs on the same
// device and shapes give identical bits.
//
// Scratch (column partials, sort buffers, CUB temporaries) comes from the
// queue's workspace, reused in stream order, so a step allocates nothing.
#pragma once

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_reduce.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda.hpp"
#include "gemm.cuh"  // also bf16 (= strata::bf16)
#include "strata/backend/bf16.hpp"
#include "strata/backend/host/kernels.hpp"  // strata::backend::activation

namespace strata::backend::cuda {

namespace detail {

template <class T>
inline constexpr bool is_real_v = std::is_same_v<T, float> || std::is_same_v<T, double>;
template <class T>
inline constexpr bool is_elem_v = is_real_v<T> || std::is_same_v<T, bf16>;

// Arithmetic type for elementwise work on T (bf16 computes in float).
template <class T>
struct compute_type {
  using type = T;
};
template <>
struct compute_type<bf16> {
  using type = float;
};
template <class T>
using compute_t = typename compute_type<T>::type;

[[noreturn]] inline void fail(const char* kernel, const std::string& what) {
  throw std::invalid_argument(std::string("strata: ") + kernel + ": " + what);
}
inline void need(bool ok, const char* kernel, const char* what) {
  if (!ok) fail(kernel, what);
}

template <int V>
using ic = std::integral_constant<int, V>;

inline constexpr unsigned flat_threads = 256;
// Grid for a grid-stride loop over `items` work items: one full wave of
// resident blocks is enough to saturate memory; more only adds tail effect.
inline unsigned flat_grid(const queue& q, std::size_t items, unsigned threads = flat_threads) {
  const std::size_t want = (items + threads - 1) / threads;
  const std::size_t cap = std::size_t(q.sm_count()) * (2048 / threads);
  return static_cast<unsigned>(std::max<std::size_t>(1, std::min(want, cap)));
}

__host__ __device__ inline bool aligned16(const void* p) noexcept { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

// Scratch for one call: the queue's workspace when it is big enough (always,
// for the default 32 MiB and the budgets below), else a temporary buffer.
struct scratch {
  unsigned char* p = nullptr;
  buffer<unsigned char> owned;
};
inline scratch get_scratch(queue& q, std::size_t bytes) {
  scratch s;
  if (bytes <= q.workspace_bytes()) {
    s.p = static_cast<unsigned char*>(q.workspace());
  } else {
    s.owned = buffer<unsigned char>(bytes);
    s.p = s.owned.data();
  }
  return s;
}
// Carves 256-byte aligned pieces out of a scratch region.
struct carver {
  unsigned char* p;
  template <class T>
  T* take(std::size_t n) {
    T* r = reinterpret_cast<T*>(p);
    p += round_up(n * sizeof(T), alignment);
    return r;
  }
};
template <class... Sizes>
std::size_t carve_bytes(Sizes... bytes) {
  return (round_up(bytes, alignment) + ... + 0);
}

// ---------------------------------------------------------------------------
// Device helpers
// ---------------------------------------------------------------------------

template <class T>
__device__ __forceinline__ T d_exp(T x) {
  if constexpr (std::is_same_v<T, float>)
    return expf(x);
  else
    return exp(x);
}
template <class T>
__device__ __forceinline__ T d_tanh(T x) {
  if constexpr (std::is_same_v<T, float>)
    return tanhf(x);
  else
    return tanh(x);
}
template <class T>
__device__ __forceinline__ T d_sqrt(T x) {
  if constexpr (std::is_same_v<T, float>)
    return sqrtf(x);
  else
    return sqrt(x);
}
// Bit patterns, because std::numeric_limits is host-only constexpr here.
template <class T>
__device__ __forceinline__ T d_nan() {
  if constexpr (std::is_same_v<T, float>)
    return __int_as_float(0x7fc00000);
  else if constexpr (std::is_same_v<T, double>)
    return __longlong_as_double(0x7ff8000000000000LL);
  else
    return T::from_bits(0x7fc0);  // bf16 quiet NaN
}
// +0 as bit pattern for bf16 (its float constructor is an instruction).
template <class T>
__device__ __forceinline__ T d_zero() {
  if constexpr (std::is_same_v<T, bf16>)
    return T::from_bits(0);
  else
    return T(0);
}
template <class T>
__device__ __forceinline__ T d_neg_inf() {
  if constexpr (std::is_same_v<T, float>)
    return __int_as_float(static_cast<int>(0xff800000u));
  else
    return __longlong_as_double(static_cast<long long>(0xfff0000000000000ull));
}
__device__ __forceinline__ std::size_t d_min(std::size_t a, std::size_t b) { return a < b ? a : b; }
// i / d, in 32 bits when the whole index space fits (64-bit division is a
// long emulated sequence; elementwise kernels do one per vector).
__device__ __forceinline__ std::size_t d_div(std::size_t i, std::size_t d, bool small) {
  return small ? std::size_t(std::uint32_t(i) / std::uint32_t(d)) : i / d;
}

template <class C>
__device__ __forceinline__ C act_forward(activation a, C x) {
  switch (a) {
    case activation::relu:
      return x < C(0) ? C(0) : x;  // NaN passes through, as on the host
    case activation::gelu: {
      constexpr C c = C(0.7978845608028653558798921198687637);  // sqrt(2/pi)
      constexpr C k = C(0.044715);
      return C(0.5) * x * (C(1) + d_tanh(c * (x + k * x * x * x)));
    }
    default:
      return x;
  }
}
template <class C>
__device__ __forceinline__ C act_derivative(activation a, C x) {
  switch (a) {
    case activation::relu:
      return x > C(0) ? C(1) : C(0);
    case activation::gelu: {
      constexpr C c = C(0.7978845608028653558798921198687637);
      constexpr C k = C(0.044715);
      const C t = d_tanh(c * (x + k * x * x * x));
      return C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * c * (C(1) + C(3) * k * x * x);
    }
    default:
      return C(1);
  }
}

// 16-byte vector access: W elements of T in one load/store instruction.
template <class T, int W>
struct alignas(sizeof(T) * W) pack {
  T v[W];
};
template <int W, class T>
__device__ __forceinline__ void load(const T* p, T (&r)[W]) {
  if constexpr (W == 1) {
    r[0] = *p;
  } else {
    const pack<T, W> v = *reinterpret_cast<const pack<T, W>*>(p);
#pragma unroll
    for (int k = 0; k < W; ++k) r[k] = v.v[k];
  }
}
template <int W, class T>
__device__ __forceinline__ void store(T* p, const T (&r)[W]) {
  if constexpr (W == 1) {
    *p = r[0];
  } else {
    pack<T, W> v;
#pragma unroll
    for (int k = 0; k < W; ++k) v.v[k] = r[k];
    *reinterpret_cast<pack<T, W>*>(p) = v;
  }
}
template <class T>
inline constexpr int vec_width = (sizeof(T) <= 16 && 16 % sizeof(T) == 0) ? int(16 / sizeof(T)) : 1;

// Grid-stride loop over [0, n): f(i, ic<W>) for whole vectors starting at i,
// then f(i, ic<1>) for the n % W tail elements.
template <int W, class F>
__device__ __forceinline__ void flat_loop(std::size_t n, F&& f) {
  const std::size_t tid = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  const std::size_t nv = n / W;
  for (std::size_t v = tid; v < nv; v += stride) f(v * W, ic<W>{});
  if constexpr (W > 1) {
    const std::size_t i = nv * W + tid;
    if (i < n) f(i, ic<1>{});
  }
}

// Reductions over the TH threads of a row group (TH a multiple of 32, the
// group's threads contiguous in the block). Fixed butterfly + fixed-order
// cross-warp sum: deterministic, and every thread gets the same value. All
// threads of the block must call (contains __syncthreads when TH > 32).
template <int TH>
struct group {
  static constexpr int warps = TH / 32;
  template <class V, class Op>
  __device__ static V reduce(V v, V* sm, Op op) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    if constexpr (warps == 1) {
      return v;
    } else {
      const int lane = threadIdx.x & 31, w = int(threadIdx.x % TH) / 32;
      if (lane == 0) sm[w] = v;
      __syncthreads();
      V t = sm[0];
#pragma unroll
      for (int i = 1; i < warps; ++i) t = op(t, sm[i]);
      __syncthreads();  // sm is reused by the next reduction
      return t;
    }
  }
  template <class V>
  __device__ static V sum(V v, V* sm) {
    return reduce(v, sm, [](V a, V b) { return a + b; });
  }
  // NaN never wins a comparison, matching the host's `x > m ? x : m` scans.
  template <class V>
  __device__ static V max(V v, V* sm) {
    return reduce(v, sm, [](V a, V b) { return b > a ? b : a; });
  }
};

// Row-kernel shapes by row length D: TH threads per row, IT values cached in
// registers per thread (0: re-read from memory, for rows too long to hold),
// RPB rows per block (blocks stay >= 256 threads for occupancy).
template <class F>
void with_row_config(std::size_t D, F&& f) {
  if (D <= 256)
    f(ic<32>{}, ic<8>{}, ic<8>{});
  else if (D <= 1024)
    f(ic<128>{}, ic<8>{}, ic<2>{});
  else if (D <= 4096)
    f(ic<512>{}, ic<8>{}, ic<1>{});
  else if (D <= 8192)
    f(ic<1024>{}, ic<8>{}, ic<1>{});
  else
    f(ic<1024>{}, ic<0>{}, ic<1>{});
}
// LayerNorm backward keeps two double accumulators per cached column when
// it fuses dgamma/dbeta, so it caches 4 values per thread (more threads per
// row) to stay near 64 registers; beyond 4096 columns it does not fuse.
template <class F>
void with_row_config_backward(std::size_t D, F&& f) {
  if (D <= 128)
    f(ic<32>{}, ic<4>{}, ic<8>{});
  else if (D <= 512)
    f(ic<128>{}, ic<4>{}, ic<2>{});
  else if (D <= 2048)
    f(ic<512>{}, ic<4>{}, ic<1>{});
  else if (D <= 4096)
    f(ic<1024>{}, ic<4>{}, ic<1>{});
  else if (D <= 8192)
    f(ic<1024>{}, ic<8>{}, ic<1>{});
  else
    f(ic<1024>{}, ic<0>{}, ic<1>{});
}
// Single-pass row kernels need no cache.
template <class F>
void with_row_threads(std::size_t D, F&& f) {
  if (D <= 256)
    f(ic<32>{}, ic<8>{});
  else if (D <= 2048)
    f(ic<128>{}, ic<2>{});
  else
    f(ic<512>{}, ic<1>{});
}

// ---------------------------------------------------------------------------
// Device-side label/id errors (see the file comment)
// ---------------------------------------------------------------------------

enum kernel_code : int {
  kc_softmax_forward = 1,
  kc_softmax_backward,
  kc_xent_target_logit,
  kc_xent_local_backward,
  kc_embedding_forward,
  kc_embedding_backward,
};
inline const char* kernel_name(int code) {
  switch (code) {
    case kc_softmax_forward:
      return "softmax_cross_entropy_forward";
    case kc_softmax_backward:
      return "softmax_cross_entropy_backward";
    case kc_xent_target_logit:
      return "xent_target_logit";
    case kc_xent_local_backward:
      return "xent_local_backward";
    case kc_embedding_forward:
      return "embedding_forward";
    case kc_embedding_backward:
      return "embedding_backward";
    default:
      return "kernel";
  }
}

// First kernel (in stream order) to see a bad label claims the word; its
// threads then keep the lowest row (packed above the label for atomicMin).
__device__ __forceinline__ void report_label(device_status* st, int code, std::size_t row, std::int32_t label,
                                             long long lo, long long hi) {
  const int prev = atomicCAS(&st->kernel, 0, code);
  if (prev != 0 && prev != code) return;
  st->lo = lo;  // same values from every reporting thread
  st->hi = hi;
  const unsigned long long r = row < 0xffffffffull ? row : 0xffffffffull;
  atomicMin(&st->first_bad, (r << 32) | static_cast<std::uint32_t>(label));
}

inline device_status* status_word(queue& q) { return &q.state().dev_slots->status; }

// True when p is ordinary pageable host memory (not visible to kernels).
inline bool host_only_pointer(const void* p) {
  cudaPointerAttributes a{};
  STRATA_CUDA_CHECK(cudaPointerGetAttributes(&a, p));
  return a.type == cudaMemoryTypeUnregistered;
}

}  // namespace detail

// Throws the std::out_of_range a host kernel would have thrown for the first
// invalid label/id any kernel on q has met since the last call, and clears
// the record. SYNCHRONIZES q.
inline void raise_device_errors(queue& q) {
  detail::queue_state& s = q.state();
  STRATA_CUDA_CHECK(cudaMemcpyAsync(&s.host_slots->status, &s.dev_slots->status, sizeof(detail::device_status),
                                    cudaMemcpyDeviceToHost, s.stream));
  q.synchronize();
  const detail::device_status st = s.host_slots->status;
  if (st.kernel == 0) return;
  const detail::device_status clean{};
  s.host_slots->status = clean;
  STRATA_CUDA_CHECK(cudaMemcpyAsync(&s.dev_slots->status, &s.host_slots->status, sizeof clean,
                                    cudaMemcpyHostToDevice, s.stream));
  q.synchronize();
  const unsigned long long row = st.first_bad >> 32;
  const auto label = static_cast<std::int32_t>(static_cast<std::uint32_t>(st.first_bad & 0xffffffffull));
  // Word for word the host's check_labels message (which says "label" for ids too).
  throw std::out_of_range(std::string("strata: ") + detail::kernel_name(st.kernel) + ": label " +
                          std::to_string(label) + " at row " + std::to_string(row) + " is outside [" +
                          std::to_string(st.lo) + ", " + std::to_string(st.hi) + ")");
}

// ---------------------------------------------------------------------------
// Bias + activation
// ---------------------------------------------------------------------------

namespace detail {

template <class T, int W>
__global__ void k_bias_act(activation act, std::size_t rows, std::size_t cols, const T* x, std::size_t ldx,
                           const T* __restrict__ bias, T* pre, std::size_t ldp, T* y, std::size_t ldy) {
  using C = compute_t<T>;
  const std::size_t vpr = cols / W, total = rows * vpr;
  const bool small = total <= 0xffffffffull;
  for (std::size_t v = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; v < total;
       v += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t r = d_div(v, vpr, small), c = (v - r * vpr) * W;
    T xv[W], bv[W], pv[W], yv[W];
    load<W>(x + r * ldx + c, xv);
    if (bias) load<W>(bias + c, bv);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const C s = bias ? C(xv[k]) + C(bv[k]) : C(xv[k]);
      pv[k] = T(s);
      yv[k] = T(act_forward(act, s));
    }
    if (pre) store<W>(pre + r * ldp + c, pv);
    store<W>(y + r * ldy + c, yv);
  }
}

// y = act(x + bias) on a rows x cols block with leading dimensions (the
// public kernel is the contiguous case; gemm_bias_act uses ldc).
template <class T>
void bias_act_2d(queue& q, activation act, std::size_t rows, std::size_t cols, const T* x, std::size_t ldx,
                 const T* bias, T* pre, std::size_t ldp, T* y, std::size_t ldy) {
  if (rows * cols == 0) return;
  constexpr int W = vec_width<T>;
  const bool vec = cols % W == 0 && ldx % W == 0 && ldy % W == 0 && (!pre || ldp % W == 0) && aligned16(x) &&
                   aligned16(y) && (!pre || aligned16(pre)) && (!bias || aligned16(bias));
  if (vec) {
    k_bias_act<T, W><<<flat_grid(q, rows * cols / W), flat_threads, 0, q.stream()>>>(act, rows, cols, x, ldx, bias,
                                                                                       pre, ldp, y, ldy);
  } else {
    k_bias_act<T, 1><<<flat_grid(q, rows * cols), flat_threads, 0, q.stream()>>>(act, rows, cols, x, ldx, bias, pre,
                                                                                  ldp, y, ldy);
  }
  STRATA_CUDA_CHECK_LAUNCH("k_bias_act");
}

template <class T, int W>
__global__ void k_activation_backward(activation act, std::size_t n, const T* pre, const T* dy, T* dx) {
  using C = compute_t<T>;
  flat_loop<W>(n, [&](std::size_t i, auto w) {
    constexpr int V = decltype(w)::value;
    T p[V], g[V], o[V];
    load<V>(dy + i, g);
    if (act != activation::none) load<V>(pre + i, p);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      if (act == activation::none)
        o[k] = g[k];
      else if (act == activation::relu)
        o[k] = C(p[k]) > C(0) ? g[k] : d_zero<T>();
      else
        o[k] = T(C(g[k]) * act_derivative(act, C(p[k])));
    }
    store<V>(dx + i, o);
  });
}

}  // namespace detail

// y = act(x + bias) over rows x cols; bias may be null; pre_out (may be null)
// receives x + bias. pre_out and y may each alias x. T: float, double, bf16.
template <class T>
void bias_activation_forward(queue& q, activation act, std::size_t rows, std::size_t cols, const T* x,
                             const T* bias, T* pre_out, T* y) {
  static_assert(detail::is_elem_v<T>);
  if (rows * cols == 0) return;
  detail::need(x && y, "bias_activation_forward", "x and y must be non-null");
  detail::bias_act_2d(q, act, rows, cols, x, cols, bias, pre_out, cols, y, cols);
}

// dx = dy * act'(pre), n elements; dx may alias dy.
template <class T>
void activation_backward(queue& q, activation act, std::size_t n, const T* pre, const T* dy, T* dx) {
  static_assert(detail::is_elem_v<T>);
  if (n == 0) return;
  detail::need(dy && dx && (pre || act == activation::none), "activation_backward", "null pointer");
  constexpr int W = detail::vec_width<T>;
  if (detail::aligned16(dy) && detail::aligned16(dx) && (!pre || detail::aligned16(pre)))
    detail::k_activation_backward<T, W>
        <<<detail::flat_grid(q, n / W + 1), detail::flat_threads, 0, q.stream()>>>(act, n, pre, dy, dx);
  else
    detail::k_activation_backward<T, 1>
        <<<detail::flat_grid(q, n), detail::flat_threads, 0, q.stream()>>>(act, n, pre, dy, dx);
  STRATA_CUDA_CHECK_LAUNCH("k_activation_backward");
}

// ---------------------------------------------------------------------------
// Deterministic column sums (bias_grad, layernorm dgamma/dbeta fallback)
// ---------------------------------------------------------------------------

namespace detail {

inline constexpr int colsum_tx = 32, colsum_ty = 8;
// Partials are capped at this many bytes so they always fit the default
// workspace; the chunking depends only on the shape (not the device).
inline constexpr std::size_t partial_budget = std::size_t(16) << 20;

struct chunking {
  std::size_t chunks, rows_per_chunk;
};
inline chunking column_chunks(std::size_t rows, std::size_t cols, std::size_t nout, std::size_t min_rows,
                              std::size_t max_chunks) {
  std::size_t R = std::max(min_rows, (rows + max_chunks - 1) / max_chunks);
  std::size_t chunks = (rows + R - 1) / R;
  const std::size_t cap = std::max<std::size_t>(1, partial_budget / (std::max<std::size_t>(cols, 1) * nout * 8));
  if (chunks > cap) {
    chunks = cap;
    R = (rows + chunks - 1) / chunks;
    chunks = (rows + R - 1) / R;
  }
  return {std::max<std::size_t>(chunks, 1), std::max<std::size_t>(R, 1)};
}

// Pass 1: block (32 x 8) owns 32 columns of one row chunk; each thread sums
// every 8th row in order, then the 8 row-lanes combine in order. With a
// single chunk the result goes straight to the outputs. T here is the
// OUTPUT (gradient) type, float or double; f reads the inputs, whatever
// their type, and adds doubles.
template <class T, int NOUT, class F>
__global__ void __launch_bounds__(colsum_tx* colsum_ty)
    k_colsum_partial(std::size_t rows, std::size_t cols, std::size_t rows_per_chunk, F f, double* partial, T* out0,
                     T* out1, bool accumulate) {
  __shared__ double sm[NOUT][colsum_ty][colsum_tx + 1];
  const std::size_t c = blockIdx.x * std::size_t(colsum_tx) + threadIdx.x;
  const std::size_t r0 = blockIdx.y * rows_per_chunk, r1 = d_min(rows, r0 + rows_per_chunk);
  double acc[NOUT] = {};
  if (c < cols)
    for (std::size_t r = r0 + threadIdx.y; r < r1; r += colsum_ty) f(r, c, acc);
#pragma unroll
  for (int o = 0; o < NOUT; ++o) sm[o][threadIdx.y][threadIdx.x] = acc[o];
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  T* outs[2] = {out0, out1};
#pragma unroll
  for (int o = 0; o < NOUT; ++o) {
    double s = sm[o][0][threadIdx.x];
#pragma unroll
    for (int k = 1; k < colsum_ty; ++k) s += sm[o][k][threadIdx.x];
    if (!partial) {
      if (outs[o]) outs[o][c] = T((accumulate ? double(outs[o][c]) : 0.0) + s);
    } else {
      partial[(blockIdx.y * std::size_t(NOUT) + o) * cols + c] = s;
    }
  }
}

// Pass 2: out[c] (=|+=) sum over chunks of partial, in chunk order.
template <class T, int NOUT>
__global__ void k_colsum_final(std::size_t chunks, std::size_t cols, const double* partial, T* out0, T* out1,
                               bool accumulate) {
  T* outs[2] = {out0, out1};
  for (std::size_t c = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; c < cols;
       c += std::size_t(gridDim.x) * blockDim.x) {
#pragma unroll
    for (int o = 0; o < NOUT; ++o) {
      if (!outs[o]) continue;
      double s = 0;
      for (std::size_t ch = 0; ch < chunks; ++ch) s += partial[(ch * NOUT + o) * cols + c];
      outs[o][c] = T((accumulate ? double(outs[o][c]) : 0.0) + s);
    }
  }
}

template <class T, int NOUT, class F>
void column_sums(queue& q, std::size_t rows, std::size_t cols, F f, T* out0, T* out1, bool accumulate) {
  const chunking ch = column_chunks(rows, cols, NOUT, 128, 1024);
  scratch sc;
  double* partial = nullptr;
  if (ch.chunks > 1) {
    sc = get_scratch(q, ch.chunks * NOUT * cols * sizeof(double));
    partial = reinterpret_cast<double*>(sc.p);
  }
  const dim3 grid(static_cast<unsigned>((cols + colsum_tx - 1) / colsum_tx), static_cast<unsigned>(ch.chunks));
  k_colsum_partial<T, NOUT><<<grid, dim3(colsum_tx, colsum_ty), 0, q.stream()>>>(rows, cols, ch.rows_per_chunk, f,
                                                                                 partial, out0, out1, accumulate);
  STRATA_CUDA_CHECK_LAUNCH("k_colsum_partial");
  if (ch.chunks > 1) {
    k_colsum_final<T, NOUT><<<flat_grid(q, cols), flat_threads, 0, q.stream()>>>(ch.chunks, cols, partial, out0, out1,
                                                                                 accumulate);
    STRATA_CUDA_CHECK_LAUNCH("k_colsum_final");
  }
}

template <class T>
struct bias_grad_term {
  const T* dy;
  std::size_t cols;
  __device__ void operator()(std::size_t r, std::size_t c, double* acc) const { acc[0] += double(dy[r * cols + c]); }
};

}  // namespace detail

// dbias[c] (=|+=) sum over rows of dy[r, c]; double accumulation, deterministic.
// T: float, double or bf16 (the activation gradient); G: float or double (the
// bias gradient, e.g. bf16 dy into a float master gradient). G = T for reals.
template <class T, class G>
void bias_grad(queue& q, std::size_t rows, std::size_t cols, const T* dy, G* dbias, bool accumulate) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<G>);
  if (cols == 0) return;
  detail::need(dbias && (dy || rows == 0), "bias_grad", "null pointer");
  if (rows == 0) {
    if (!accumulate) STRATA_CUDA_CHECK(cudaMemsetAsync(dbias, 0, cols * sizeof(G), q.stream()));
    return;
  }
  detail::column_sums<G, 1>(q, rows, cols, detail::bias_grad_term<T>{dy, cols}, dbias, static_cast<G*>(nullptr),
                            accumulate);
}

// ---------------------------------------------------------------------------
// Softmax cross-entropy
// ---------------------------------------------------------------------------

namespace detail {

// T: logits / probs (float, double, bf16), computed in C = compute_t<T>;
// S: the loss (float or double).
template <class T, class S, int TH, int IT, int RPB>
__global__ void __launch_bounds__(TH* RPB)
    k_softmax_xent_forward(std::size_t rows, std::size_t cols, const T* logits, const std::int32_t* labels, S* loss,
                           T* probs, device_status* st) {
  using C = compute_t<T>;
  __shared__ double sd[RPB][TH / 32];
  __shared__ C sm[RPB][TH / 32];
  const int g = int(threadIdx.x) / TH, t = int(threadIdx.x) % TH;
  const std::size_t r = std::size_t(blockIdx.x) * RPB + g;
  const bool active = r < rows;
  const T* x = logits + (active ? r : 0) * cols;
  constexpr int NC = IT > 0 ? IT : 1;
  C v[NC];
  C m = d_neg_inf<C>();
  if constexpr (IT > 0) {
#pragma unroll
    for (int k = 0; k < IT; ++k) {
      const std::size_t j = std::size_t(t) + std::size_t(k) * TH;
      v[k] = (active && j < cols) ? C(x[j]) : d_neg_inf<C>();
      m = v[k] > m ? v[k] : m;
    }
  } else if (active) {
    for (std::size_t j = t; j < cols; j += TH) {
      const C xj = C(x[j]);
      m = xj > m ? xj : m;
    }
  }
  m = group<TH>::max(m, sm[g]);
  double s = 0;
  if constexpr (IT > 0) {
#pragma unroll
    for (int k = 0; k < IT; ++k)
      if (active && std::size_t(t) + std::size_t(k) * TH < cols) s += double(d_exp(v[k] - m));
  } else if (active) {
    for (std::size_t j = t; j < cols; j += TH) s += double(d_exp(C(x[j]) - m));
  }
  s = group<TH>::sum(s, sd[g]);
  if (!active) return;  // no barriers below
  const std::int32_t l = labels[r];
  const bool ok = l >= 0 && std::size_t(l) < cols;
  if (t == 0) {
    if (ok) {
      // log(s) >= 0 and x[l] - m <= 0: no cancellation between large terms.
      loss[r] = S(log(s) - double(C(x[l]) - m));
    } else {
      loss[r] = d_nan<S>();
      report_label(st, kc_softmax_forward, r, l, 0, static_cast<long long>(cols));
    }
  }
  if (probs) {
    T* p = probs + r * cols;
    const C inv = C(1.0 / s);
    if constexpr (IT > 0) {
#pragma unroll
      for (int k = 0; k < IT; ++k) {
        const std::size_t j = std::size_t(t) + std::size_t(k) * TH;
        if (j < cols) p[j] = T(d_exp(v[k] - m) * inv);
      }
    } else {
      for (std::size_t j = t; j < cols; j += TH) p[j] = T(d_exp(C(x[j]) - m) * inv);
    }
  }
}

// Both elementwise backward kernels: d[r, j] = s * (p_j - [j == label]), with
// p either given (softmax backward) or recomputed from logits and the
// all-reduced row statistics (vocabulary-parallel backward). T: src and d
// (computed in C = compute_t<T>); S: row_max / sum_exp.
template <class T, class S, int W, bool FromLogits>
__global__ void k_xent_backward(std::size_t rows, std::size_t cols, const T* src, const std::int32_t* labels,
                                std::size_t col_offset, const S* row_max, const S* sum_exp, compute_t<T> s, T* d,
                                device_status* st) {
  using C = compute_t<T>;
  const std::size_t n = rows * cols;
  const bool small = n <= 0xffffffffull;
  flat_loop<W>(n, [&](std::size_t i, auto w) {
    constexpr int V = decltype(w)::value;
    // A vector never straddles rows (cols % W == 0 when W > 1).
    const std::size_t r = d_div(i, cols, small), j0 = i - r * cols;
    const std::int32_t l = labels[r];
    T in[V], out[V];
    load<V>(src + i, in);
    bool bad;
    std::size_t lj = ~std::size_t(0);  // label column within this slice, if any
    if constexpr (FromLogits) {
      bad = l < 0;
      if (!bad && std::size_t(l) >= col_offset && std::size_t(l) - col_offset < cols) lj = std::size_t(l) - col_offset;
    } else {
      bad = l < 0 || std::size_t(l) >= cols;
      if (!bad) lj = std::size_t(l);
    }
    if (bad) {
#pragma unroll
      for (int k = 0; k < V; ++k) out[k] = d_nan<T>();
      if (j0 == 0)
        report_label(st, FromLogits ? kc_xent_local_backward : kc_softmax_backward, r, l, 0,
                     FromLogits ? static_cast<long long>(INT32_MAX) : static_cast<long long>(cols));
    } else {
      C m = C(0), inv = C(0);
      if constexpr (FromLogits) {
        m = C(row_max[r]);
        inv = C(1.0 / double(sum_exp[r]));
      }
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const C p = FromLogits ? d_exp(C(in[k]) - m) * inv : C(in[k]);
        out[k] = T(j0 + k == lj ? s * (p - C(1)) : s * p);
      }
    }
    store<V>(d + i, out);
  });
}

template <class T, class S, bool FromLogits>
void xent_backward_launch(queue& q, std::size_t rows, std::size_t cols, const T* src, const std::int32_t* labels,
                          std::size_t col_offset, const S* row_max, const S* sum_exp, compute_t<T> s, T* d) {
  constexpr int W = vec_width<T>;
  const std::size_t n = rows * cols;
  if (cols % W == 0 && aligned16(src) && aligned16(d))
    k_xent_backward<T, S, W, FromLogits><<<flat_grid(q, n / W), flat_threads, 0, q.stream()>>>(
        rows, cols, src, labels, col_offset, row_max, sum_exp, s, d, status_word(q));
  else
    k_xent_backward<T, S, 1, FromLogits><<<flat_grid(q, n), flat_threads, 0, q.stream()>>>(
        rows, cols, src, labels, col_offset, row_max, sum_exp, s, d, status_word(q));
  STRATA_CUDA_CHECK_LAUNCH("k_xent_backward");
}

template <class T, class S, int TH, int RPB>
__global__ void __launch_bounds__(TH* RPB)
    k_xent_local_max(std::size_t rows, std::size_t cols, const T* logits, S* row_max) {
  using C = compute_t<T>;
  __shared__ C sm[RPB][TH / 32];
  const int g = int(threadIdx.x) / TH, t = int(threadIdx.x) % TH;
  const std::size_t r = std::size_t(blockIdx.x) * RPB + g;
  const bool active = r < rows;
  C m = d_neg_inf<C>();
  if (active)
    for (std::size_t j = t; j < cols; j += TH) {
      const C v = C(logits[r * cols + j]);
      m = v > m ? v : m;
    }
  m = group<TH>::max(m, sm[g]);
  if (active && t == 0) row_max[r] = S(m);
}

template <class T, class S, int TH, int RPB>
__global__ void __launch_bounds__(TH* RPB)
    k_xent_local_sumexp(std::size_t rows, std::size_t cols, const T* logits, const S* row_max, S* sum_exp) {
  using C = compute_t<T>;
  __shared__ double sd[RPB][TH / 32];
  const int g = int(threadIdx.x) / TH, t = int(threadIdx.x) % TH;
  const std::size_t r = std::size_t(blockIdx.x) * RPB + g;
  const bool active = r < rows;
  double s = 0;
  if (active) {
    const C m = C(row_max[r]);
    for (std::size_t j = t; j < cols; j += TH) s += double(d_exp(C(logits[r * cols + j]) - m));
  }
  s = group<TH>::sum(s, sd[g]);
  if (active && t == 0) sum_exp[r] = S(s);
}

template <class T, class S>
__global__ void k_xent_target_logit(std::size_t rows, std::size_t cols, const T* logits, const std::int32_t* labels,
                                    std::size_t col_offset, S* target, device_status* st) {
  using C = compute_t<T>;
  for (std::size_t r = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; r < rows;
       r += std::size_t(gridDim.x) * blockDim.x) {
    const std::int32_t l = labels[r];
    if (l < 0) {
      target[r] = d_nan<S>();
      report_label(st, kc_xent_target_logit, r, l, 0, INT32_MAX);
      continue;
    }
    const std::size_t lu = std::size_t(l);
    target[r] = (lu >= col_offset && lu - col_offset < cols) ? S(C(logits[r * cols + (lu - col_offset)])) : S(0);
  }
}

template <class T>
__global__ void k_xent_loss(std::size_t rows, const T* row_max, const T* sum_exp, const T* target, T* loss) {
  for (std::size_t r = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; r < rows;
       r += std::size_t(gridDim.x) * blockDim.x)
    loss[r] = T(log(double(sum_exp[r])) - (double(target[r]) - double(row_max[r])));
}

}  // namespace detail

// loss[r] = logsumexp(logits[r, :]) - logits[r, labels[r]]; probs_out (may
// be null) receives softmax(logits). One thread group per row; exp in
// compute_t<T> (float for bf16 logits), sums in double; the loss in S (float
// or double; S = T for reals), probs in T. A label outside [0, cols) gives a
// NaN loss for its row and is reported by raise_device_errors (see the file
// comment).
template <class T, class S>
void softmax_cross_entropy_forward(queue& q, std::size_t rows, std::size_t cols, const T* logits,
                                   const std::int32_t* labels, S* loss_per_row, T* probs_out) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  if (rows == 0) return;
  detail::need(cols > 0, "softmax_cross_entropy_forward", "cols must be positive");
  detail::need(logits && labels && loss_per_row, "softmax_cross_entropy_forward", "null pointer");
  detail::with_row_config(cols, [&](auto th, auto it, auto rpb) {
    constexpr int TH = decltype(th)::value, IT = decltype(it)::value, RPB = decltype(rpb)::value;
    const unsigned blocks = static_cast<unsigned>((rows + RPB - 1) / RPB);
    detail::k_softmax_xent_forward<T, S, TH, IT, RPB><<<blocks, TH * RPB, 0, q.stream()>>>(
        rows, cols, logits, labels, loss_per_row, probs_out, detail::status_word(q));
  });
  STRATA_CUDA_CHECK_LAUNCH("k_softmax_xent_forward");
}

// dlogits = scale * (probs - onehot(labels)), computed in compute_t<T> with
// scale rounded to it; dlogits may alias probs. T: float, double, bf16.
template <class T>
void softmax_cross_entropy_backward(queue& q, std::size_t rows, std::size_t cols, const T* probs,
                                    const std::int32_t* labels, double scale, T* dlogits) {
  static_assert(detail::is_elem_v<T>);
  using C = detail::compute_t<T>;
  if (rows * cols == 0) return;
  detail::need(probs && labels && dlogits, "softmax_cross_entropy_backward", "null pointer");
  detail::xent_backward_launch<T, C, false>(q, rows, cols, probs, labels, 0, static_cast<const C*>(nullptr),
                                            static_cast<const C*>(nullptr), C(scale), dlogits);
}

// --- Vocabulary-parallel cross-entropy (see host/kernels.hpp for the protocol)
// Logits T (float, double, bf16; arithmetic in compute_t<T>), row statistics
// S (float or double; S = T for reals), reductions in double.

// row_max[r] = max_j logits[r, j] (-inf for an empty slice).
template <class T, class S>
void xent_local_max(queue& q, std::size_t rows, std::size_t cols, const T* logits, S* row_max) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  if (rows == 0) return;
  detail::need(row_max && (logits || cols == 0), "xent_local_max", "null pointer");
  detail::with_row_threads(cols, [&](auto th, auto rpb) {
    constexpr int TH = decltype(th)::value, RPB = decltype(rpb)::value;
    detail::k_xent_local_max<T, S, TH, RPB>
        <<<static_cast<unsigned>((rows + RPB - 1) / RPB), TH * RPB, 0, q.stream()>>>(rows, cols, logits, row_max);
  });
  STRATA_CUDA_CHECK_LAUNCH("k_xent_local_max");
}

// sum_exp[r] = sum_j exp(logits[r, j] - row_max[r]) with the GLOBAL row max.
template <class T, class S>
void xent_local_sumexp(queue& q, std::size_t rows, std::size_t cols, const T* logits, const S* row_max,
                       S* sum_exp) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  if (rows == 0) return;
  detail::need(row_max && sum_exp && (logits || cols == 0), "xent_local_sumexp", "null pointer");
  detail::with_row_threads(cols, [&](auto th, auto rpb) {
    constexpr int TH = decltype(th)::value, RPB = decltype(rpb)::value;
    detail::k_xent_local_sumexp<T, S, TH, RPB><<<static_cast<unsigned>((rows + RPB - 1) / RPB), TH * RPB, 0,
                                                 q.stream()>>>(rows, cols, logits, row_max, sum_exp);
  });
  STRATA_CUDA_CHECK_LAUNCH("k_xent_local_sumexp");
}

// target[r] = logits[r, labels[r] - col_offset] inside this slice, else 0.
// A negative label gives NaN and is reported (raise_device_errors).
template <class T, class S>
void xent_target_logit(queue& q, std::size_t rows, std::size_t cols, const T* logits, const std::int32_t* labels,
                       std::size_t col_offset, S* target) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  if (rows == 0) return;
  detail::need(labels && target && (logits || cols == 0), "xent_target_logit", "null pointer");
  detail::k_xent_target_logit<T, S><<<detail::flat_grid(q, rows), detail::flat_threads, 0, q.stream()>>>(
      rows, cols, logits, labels, col_offset, target, detail::status_word(q));
  STRATA_CUDA_CHECK_LAUNCH("k_xent_target_logit");
}

// loss[r] = log(sum_exp[r]) + row_max[r] - target[r]. S: float or double.
template <class S>
void xent_loss(queue& q, std::size_t rows, const S* row_max, const S* sum_exp, const S* target, S* loss) {
  static_assert(detail::is_real_v<S>);
  if (rows == 0) return;
  detail::need(row_max && sum_exp && target && loss, "xent_loss", "null pointer");
  detail::k_xent_loss<S>
      <<<detail::flat_grid(q, rows), detail::flat_threads, 0, q.stream()>>>(rows, row_max, sum_exp, target, loss);
  STRATA_CUDA_CHECK_LAUNCH("k_xent_loss");
}

// This rank's slice of dlogits = scale * (softmax - onehot), the softmax
// recomputed in compute_t<T> from the logits and the all-reduced statistics.
template <class T, class S>
void xent_local_backward(queue& q, std::size_t rows, std::size_t cols, const T* logits, const std::int32_t* labels,
                         std::size_t col_offset, const S* row_max, const S* sum_exp, double scale, T* dlogits) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  if (rows * cols == 0) return;
  detail::need(logits && labels && row_max && sum_exp && dlogits, "xent_local_backward", "null pointer");
  detail::xent_backward_launch<T, S, true>(q, rows, cols, logits, labels, col_offset, row_max, sum_exp,
                                           detail::compute_t<T>(scale), dlogits);
}

namespace detail {
template <class T>
__global__ void __launch_bounds__(256)
    k_loss_accumulate(std::size_t n, const T* loss, const T* target, const T* row_max, double* acc) {
  __shared__ double sm[2][256 / 32];
  double s = 0, c = 0;
  for (std::size_t r = threadIdx.x; r < n; r += blockDim.x) {
    s += double(loss[r]);
    c += target[r] >= row_max[r] ? 1.0 : 0.0;
  }
  s = group<256>::sum(s, sm[0]);
  c = group<256>::sum(c, sm[1]);
  if (threadIdx.x == 0) {
    acc[0] += s;
    acc[1] += c;
    acc[2] += double(n);
  }
}
}  // namespace detail

// acc[0] += sum of loss[r], acc[1] += #(target[r] >= row_max[r]), acc[2] +=
// rows counted, over the first min(rows, valid) rows; acc is 3 doubles of
// device memory, so the loss books stay on the device (no sync). One block,
// fixed reduction order: deterministic. T: the statistics type (float or
// double, stat_t of the step's precision).
template <class T>
void loss_accumulate(queue& q, std::size_t rows, std::size_t valid, const T* loss, const T* target,
                     const T* row_max, double* acc) {
  static_assert(detail::is_real_v<T>);
  const std::size_t n = rows < valid ? rows : valid;
  if (n == 0) return;
  detail::need(loss && target && row_max && acc, "loss_accumulate", "null pointer");
  detail::k_loss_accumulate<T><<<1, 256, 0, q.stream()>>>(n, loss, target, row_max, acc);
  STRATA_CUDA_CHECK_LAUNCH("k_loss_accumulate");
}

// ---------------------------------------------------------------------------
// LayerNorm
// ---------------------------------------------------------------------------

namespace detail {

// T: x, gamma, beta, y (cached and read in C = compute_t<T>); S: mean, rstd.
// Statistics and the normalized output in double, y rounded to T.
template <class T, class S, int TH, int IT, int RPB>
__global__ void __launch_bounds__(TH* RPB)
    k_layernorm_forward(std::size_t rows, std::size_t D, const T* x, const T* gamma, const T* beta, double eps, T* y,
                        S* mean_out, S* rstd_out) {
  using C = compute_t<T>;
  __shared__ double sd[RPB][TH / 32];
  const int g = int(threadIdx.x) / TH, t = int(threadIdx.x) % TH;
  const std::size_t r = std::size_t(blockIdx.x) * RPB + g;
  const bool active = r < rows;
  const T* xr = x + (active ? r : 0) * D;
  constexpr int NC = IT > 0 ? IT : 1;
  C v[NC];
  double s = 0;
  if constexpr (IT > 0) {
#pragma unroll
    for (int k = 0; k < IT; ++k) {
      const std::size_t j = std::size_t(t) + std::size_t(k) * TH;
      v[k] = (active && j < D) ? C(xr[j]) : C(0);
      s += double(v[k]);
    }
  } else if (active) {
    for (std::size_t j = t; j < D; j += TH) s += double(xr[j]);
  }
  const double mean = group<TH>::sum(s, sd[g]) / double(D);
  // Two-pass variance (as the host): no cancellation for large means.
  double ss = 0;
  if constexpr (IT > 0) {
#pragma unroll
    for (int k = 0; k < IT; ++k)
      if (active && std::size_t(t) + std::size_t(k) * TH < D) {
        const double c = double(v[k]) - mean;
        ss += c * c;
      }
  } else if (active) {
    for (std::size_t j = t; j < D; j += TH) {
      const double c = double(xr[j]) - mean;
      ss += c * c;
    }
  }
  const double var = group<TH>::sum(ss, sd[g]) / double(D);
  if (!active) return;
  const double rstd = 1.0 / sqrt(var + eps);
  if (t == 0) {
    if (mean_out) mean_out[r] = S(mean);
    if (rstd_out) rstd_out[r] = S(rstd);
  }
  T* yr = y + r * D;
  const auto out = [&](std::size_t j, C xv) {
    double o = (double(xv) - mean) * rstd;
    if (gamma) o *= double(gamma[j]);
    if (beta) o += double(beta[j]);
    yr[j] = T(o);
  };
  if constexpr (IT > 0) {
#pragma unroll
    for (int k = 0; k < IT; ++k) {
      const std::size_t j = std::size_t(t) + std::size_t(k) * TH;
      if (j < D) out(j, v[k]);
    }
  } else {
    for (std::size_t j = t; j < D; j += TH) out(j, C(xr[j]));
  }
}

// Backward. Each block walks one chunk of rows (RPB at a time). Per row: dx
// from the row sums of g = dy * gamma and g * xhat. With COLS (rows up to
// 4096, see with_row_config_backward) every thread also keeps running dgamma/dbeta sums
// for its columns across the chunk; the block's groups combine them in
// order and write one partial per chunk (or the result, if one chunk).
// T: x, gamma, dy, dx (elementwise terms in C = compute_t<T>); S: mean,
// rstd; G: dgamma, dbeta.
// (Launch bounds ask for 1024 resident threads per SM: <= 64 registers.)
template <class T, class S, class G, int TH, int IT, int RPB, bool COLS>
__global__ void __launch_bounds__(TH* RPB, (TH * RPB >= 1024 ? 1 : 1024 / (TH * RPB)))
    k_layernorm_backward(std::size_t rows, std::size_t D, std::size_t rows_per_chunk, const T* x, const T* gamma,
                         const S* mean, const S* rstd, const T* dy, T* dx, double* partial,
                         G* dgamma, G* dbeta, bool accumulate) {
  using C = compute_t<T>;
  __shared__ double sd[RPB][TH / 32];
  constexpr int NC = IT > 0 ? IT : 1;
  static_assert(!COLS || IT > 0);
  constexpr int CG = (COLS && RPB > 1) ? RPB * TH * IT : 1;
  __shared__ double cg[CG], cb[CG];
  const int g = int(threadIdx.x) / TH, t = int(threadIdx.x) % TH;
  const std::size_t r0 = std::size_t(blockIdx.x) * rows_per_chunk, r1 = d_min(rows, r0 + rows_per_chunk);
  C gm[NC];  // this thread's gamma columns
  double pg[NC], pb[NC];
#pragma unroll
  for (int k = 0; k < NC; ++k) {
    const std::size_t j = std::size_t(t) + std::size_t(k) * TH;
    gm[k] = (IT > 0 && gamma && j < D) ? C(gamma[j]) : C(1);
    pg[k] = 0;
    pb[k] = 0;
  }
  for (std::size_t base = r0; base < r1; base += RPB) {
    const std::size_t r = base + g;
    const bool active = r < r1;
    const double mu = active ? double(mean[r]) : 0.0, rs = active ? double(rstd[r]) : 0.0;
    const C mu_t = C(mu), rs_t = C(rs);
    const T* xr = x + (active ? r : 0) * D;
    const T* dyr = dy + (active ? r : 0) * D;
    double sg = 0, sgx = 0;
    C xv[NC], dv[NC];
    if constexpr (IT > 0) {
#pragma unroll
      for (int k = 0; k < IT; ++k) {
        const std::size_t j = std::size_t(t) + std::size_t(k) * TH;
        const bool in = active && j < D;
        xv[k] = in ? C(xr[j]) : C(0);
        dv[k] = in ? C(dyr[j]) : C(0);
        // Elementwise terms in C, sums in double: doubles for every cached
        // element would halve occupancy for ~1 ulp of C.
        const C gk = dv[k] * gm[k], xh = (xv[k] - mu_t) * rs_t;
        sg += double(gk);
        sgx += double(gk * xh);
        if constexpr (COLS) {
          pg[k] += double(dv[k] * xh);
          pb[k] += double(dv[k]);
        }
      }
    } else if (active) {
      for (std::size_t j = t; j < D; j += TH) {
        const double gk = double(dyr[j]) * (gamma ? double(gamma[j]) : 1.0);
        sg += gk;
        sgx += gk * ((double(xr[j]) - mu) * rs);
      }
    }
    if (dx) {
      sg = group<TH>::sum(sg, sd[g]) / double(D);
      sgx = group<TH>::sum(sgx, sd[g]) / double(D);
      if (active) {
        T* dxr = dx + r * D;
        const C sg_t = C(sg), sgx_t = C(sgx);
        (void)sg_t, (void)sgx_t;
        if constexpr (IT > 0) {
#pragma unroll
          for (int k = 0; k < IT; ++k) {
            const std::size_t j = std::size_t(t) + std::size_t(k) * TH;
            if (j < D) {
              const C gk = dv[k] * gm[k], xh = (xv[k] - mu_t) * rs_t;
              dxr[j] = T(rs_t * (gk - sg_t - xh * sgx_t));
            }
          }
        } else {
          for (std::size_t j = t; j < D; j += TH) {
            const double gk = double(dyr[j]) * (gamma ? double(gamma[j]) : 1.0);
            const double xh = (double(xr[j]) - mu) * rs;
            dxr[j] = T(rs * (gk - sg - xh * sgx));
          }
        }
      }
    }
  }
  if constexpr (COLS) {
    if constexpr (RPB > 1) {
#pragma unroll
      for (int k = 0; k < IT; ++k) {
        cg[(g * IT + k) * TH + t] = pg[k];
        cb[(g * IT + k) * TH + t] = pb[k];
      }
      __syncthreads();
      if (g != 0) return;
#pragma unroll
      for (int k = 0; k < IT; ++k) {
        double a = cg[k * TH + t], b = cb[k * TH + t];
        for (int h = 1; h < RPB; ++h) {
          a += cg[(h * IT + k) * TH + t];
          b += cb[(h * IT + k) * TH + t];
        }
        pg[k] = a;
        pb[k] = b;
      }
    }
#pragma unroll
    for (int k = 0; k < IT; ++k) {
      const std::size_t j = std::size_t(t) + std::size_t(k) * TH;
      if (j >= D) continue;
      if (partial) {
        partial[(blockIdx.x * std::size_t(2) + 0) * D + j] = pg[k];
        partial[(blockIdx.x * std::size_t(2) + 1) * D + j] = pb[k];
      } else {
        if (dgamma) dgamma[j] = G((accumulate ? double(dgamma[j]) : 0.0) + pg[k]);
        if (dbeta) dbeta[j] = G((accumulate ? double(dbeta[j]) : 0.0) + pb[k]);
      }
    }
  }
}

template <class T, class S>
struct layernorm_param_terms {
  const T* x;
  const T* dy;
  const S* mean;
  const S* rstd;
  std::size_t D;
  __device__ void operator()(std::size_t r, std::size_t c, double* acc) const {
    const double d = double(dy[r * D + c]);
    acc[0] += d * ((double(x[r * D + c]) - double(mean[r])) * double(rstd[r]));
    acc[1] += d;
  }
};

}  // namespace detail

// y = (x - mean) * rstd * gamma + beta per row (biased variance, statistics
// and the normalization in double, two-pass); gamma/beta/mean_out/rstd_out
// may be null; y may alias x. T: x, gamma, beta, y (float, double, bf16);
// S: mean_out, rstd_out (float or double; S = T for reals).
template <class T, class S>
void layernorm_forward(queue& q, std::size_t rows, std::size_t D, const T* x, const T* gamma, const T* beta,
                       double eps, T* y, S* mean_out, S* rstd_out) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  if (rows == 0) return;
  detail::need(D > 0, "layernorm_forward", "D must be positive");
  detail::need(x && y, "layernorm_forward", "null pointer");
  detail::with_row_config(D, [&](auto th, auto it, auto rpb) {
    constexpr int TH = decltype(th)::value, IT = decltype(it)::value, RPB = decltype(rpb)::value;
    detail::k_layernorm_forward<T, S, TH, IT, RPB><<<static_cast<unsigned>((rows + RPB - 1) / RPB), TH * RPB, 0,
                                                     q.stream()>>>(rows, D, x, gamma, beta, eps, y, mean_out,
                                                                   rstd_out);
  });
  STRATA_CUDA_CHECK_LAUNCH("k_layernorm_forward");
}

// dx (overwritten), dgamma/dbeta (=|+= by accumulate), each may be null;
// same formulas as the host. dgamma/dbeta are deterministic (per-chunk
// partials, combined in order). T: x, gamma, dy, dx (float, double, bf16;
// elementwise terms in compute_t<T>, row and column sums in double); S: mean,
// rstd; G: dgamma, dbeta (float or double; S = G = T for reals).
template <class T, class S, class G>
void layernorm_backward(queue& q, std::size_t rows, std::size_t D, const T* x, const T* gamma, const S* mean,
                        const S* rstd, const T* dy, T* dx, G* dgamma, G* dbeta, bool accumulate) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S> && detail::is_real_v<G>);
  if (D == 0) return;
  detail::need(rows == 0 || (x && mean && rstd && dy), "layernorm_backward", "null pointer");
  const bool cols = dgamma || dbeta;
  if (rows == 0) {
    if (cols && !accumulate) {
      if (dgamma) STRATA_CUDA_CHECK(cudaMemsetAsync(dgamma, 0, D * sizeof(G), q.stream()));
      if (dbeta) STRATA_CUDA_CHECK(cudaMemsetAsync(dbeta, 0, D * sizeof(G), q.stream()));
    }
    return;
  }
  if (!dx && !cols) return;
  bool separate_cols = false;
  detail::with_row_config_backward(D, [&](auto th, auto it, auto rpb) {
    constexpr int TH = decltype(th)::value, IT = decltype(it)::value, RPB = decltype(rpb)::value;
    constexpr bool can_fuse = IT == 4;
    if constexpr (can_fuse) {
      if (cols) {
        const detail::chunking ch = detail::column_chunks(rows, D, 2, 4 * RPB, 512);
        detail::scratch sc;
        double* partial = nullptr;
        if (ch.chunks > 1) {
          sc = detail::get_scratch(q, ch.chunks * 2 * D * sizeof(double));
          partial = reinterpret_cast<double*>(sc.p);
        }
        detail::k_layernorm_backward<T, S, G, TH, IT, RPB, true>
            <<<static_cast<unsigned>(ch.chunks), TH * RPB, 0, q.stream()>>>(
                rows, D, ch.rows_per_chunk, x, gamma, mean, rstd, dy, dx, partial, dgamma, dbeta, accumulate);
        STRATA_CUDA_CHECK_LAUNCH("k_layernorm_backward");
        if (partial) {
          detail::k_colsum_final<G, 2><<<detail::flat_grid(q, D), detail::flat_threads, 0, q.stream()>>>(
              ch.chunks, D, partial, dgamma, dbeta, accumulate);
          STRATA_CUDA_CHECK_LAUNCH("k_colsum_final");
        }
        return;
      }
    }
    separate_cols = cols;
    if (!dx) return;
    detail::k_layernorm_backward<T, S, G, TH, IT, RPB, false>
        <<<static_cast<unsigned>((rows + RPB - 1) / RPB), TH * RPB, 0, q.stream()>>>(
            rows, D, RPB, x, gamma, mean, rstd, dy, dx, static_cast<double*>(nullptr), dgamma, dbeta, accumulate);
    STRATA_CUDA_CHECK_LAUNCH("k_layernorm_backward");
  });
  if (separate_cols)
    detail::column_sums<G, 2>(q, rows, D, detail::layernorm_param_terms<T, S>{x, dy, mean, rstd, D}, dgamma, dbeta,
                              accumulate);
}

// ---------------------------------------------------------------------------
// Ids and embeddings
// ---------------------------------------------------------------------------

namespace detail {

template <class I>
__global__ void k_check_ids(std::size_t n, const I* ids, std::size_t vocab, unsigned long long* first_bad) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const I v = ids[i];
    if (v < 0 || static_cast<std::size_t>(v) >= vocab) atomicMin(first_bad, static_cast<unsigned long long>(i));
  }
}

[[noreturn]] inline void bad_id(std::int32_t id, std::size_t pos, std::size_t vocab) {
  throw std::out_of_range("strata: token id " + std::to_string(id) + " at position " + std::to_string(pos) +
                          " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
}

template <class T, int W>
__global__ void k_embedding_forward(std::size_t rows, std::size_t D, const std::int32_t* ids, const T* table,
                                    std::size_t vocab_offset, std::size_t vocab_local, T* out, device_status* st) {
  const bool small = rows * D <= 0xffffffffull;
  flat_loop<W>(rows * D, [&](std::size_t i, auto w) {
    constexpr int V = decltype(w)::value;
    const std::size_t r = d_div(i, D, small), j = i - r * D;
    const std::int32_t id = ids[r];
    T o[V];
    if (id < 0) {
#pragma unroll
      for (int k = 0; k < V; ++k) o[k] = d_nan<T>();
      if (j == 0) report_label(st, kc_embedding_forward, r, id, 0, INT32_MAX);
    } else if (std::size_t(id) >= vocab_offset && std::size_t(id) - vocab_offset < vocab_local) {
      load<V>(table + (std::size_t(id) - vocab_offset) * D + j, o);
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) o[k] = d_zero<T>();
    }
    store<V>(out + i, o);
  });
}

// Sort keys: the row's table index within this slice, or vocab_local for
// "not ours" (sorted last, skipped). (A template only so that the header
// defines no non-inline kernel: one definition per program.)
template <class I>
__global__ void k_embedding_keys(std::size_t rows, const I* ids, std::size_t vocab_offset,
                                        std::size_t vocab_local, std::uint32_t* keys, std::uint32_t* rows_out,
                                        device_status* st) {
  for (std::size_t r = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; r < rows;
       r += std::size_t(gridDim.x) * blockDim.x) {
    const I id = ids[r];
    std::uint32_t k = static_cast<std::uint32_t>(vocab_local);
    if (id < 0)
      report_label(st, kc_embedding_backward, r, id, 0, INT32_MAX);
    else if (std::size_t(id) >= vocab_offset && std::size_t(id) - vocab_offset < vocab_local)
      k = static_cast<std::uint32_t>(std::size_t(id) - vocab_offset);
    keys[r] = k;
    rows_out[r] = static_cast<std::uint32_t>(r);
  }
}

// One block per (sorted position, column tile); only the first position of
// each id's run works: it adds that id's dout rows (T, converted exactly to
// G) in row order (the sort is stable), in G, onto the table row, exactly as
// the host does.
template <class T, class G>
__global__ void k_embedding_accumulate(std::size_t rows, std::size_t D, const std::uint32_t* keys,
                                       const std::uint32_t* order, const T* dout, std::uint32_t vocab_local,
                                       G* dtable) {
  const std::size_t i = blockIdx.x;
  const std::uint32_t key = keys[i];
  if (key >= vocab_local || (i > 0 && keys[i - 1] == key)) return;
  const std::size_t c = blockIdx.y * std::size_t(blockDim.x) + threadIdx.x;
  if (c >= D) return;
  G* d = dtable + std::size_t(key) * D + c;
  G acc = *d;
  for (std::size_t k = i; k < rows && keys[k] == key; ++k) acc += G(dout[std::size_t(order[k]) * D + c]);
  *d = acc;
}

inline int bits_for(std::size_t v) {
  int b = 1;
  while (b < 32 && (std::size_t(1) << b) <= v) ++b;
  return b;
}

}  // namespace detail

// Throws std::out_of_range naming the first id outside [0, vocab) and its
// position (same message as the host). Device ids are checked by a kernel
// and read back: this SYNCHRONIZES q. Ordinary (pageable) host memory is
// accepted too and checked on the host, without touching the device.
inline void check_ids(queue& q, const std::int32_t* ids, std::size_t n, std::size_t vocab) {
  if (n == 0) return;
  if (!ids) throw std::invalid_argument("strata: check_ids: null ids");
  if (detail::host_only_pointer(ids)) {
    for (std::size_t i = 0; i < n; ++i)
      if (ids[i] < 0 || std::size_t(ids[i]) >= vocab) detail::bad_id(ids[i], i, vocab);
    return;
  }
  detail::queue_state& s = q.state();
  unsigned long long* flag = &s.dev_slots->first_bad_id;
  STRATA_CUDA_CHECK(cudaMemsetAsync(flag, 0xff, sizeof *flag, s.stream));
  detail::k_check_ids<std::int32_t>
      <<<detail::flat_grid(q, n), detail::flat_threads, 0, s.stream>>>(n, ids, vocab, flag);
  STRATA_CUDA_CHECK_LAUNCH("k_check_ids");
  STRATA_CUDA_CHECK(
      cudaMemcpyAsync(&s.host_slots->first_bad_id, flag, sizeof *flag, cudaMemcpyDeviceToHost, s.stream));
  q.synchronize();
  const unsigned long long pos = s.host_slots->first_bad_id;
  if (pos == ~0ull) return;
  std::int32_t id = 0;
  STRATA_CUDA_CHECK(cudaMemcpyAsync(&s.host_slots->flag, ids + pos, sizeof id, cudaMemcpyDeviceToHost, s.stream));
  q.synchronize();
  std::memcpy(&id, &s.host_slots->flag, sizeof id);
  detail::bad_id(id, static_cast<std::size_t>(pos), vocab);
}

// out[r, :] = table[ids[r] - vocab_offset, :] inside this slice, else 0.
// A negative id gives a NaN row and is reported (raise_device_errors).
// T: float, double, bf16 (a copy: exact).
template <class T>
void embedding_forward(queue& q, std::size_t rows, std::size_t D, const std::int32_t* ids, const T* table,
                       std::size_t vocab_offset, std::size_t vocab_local, T* out) {
  static_assert(detail::is_elem_v<T>);
  if (rows * D == 0) return;
  detail::need(ids && out && (table || vocab_local == 0), "embedding_forward", "null pointer");
  constexpr int W = detail::vec_width<T>;
  if (D % W == 0 && detail::aligned16(out) && (!table || detail::aligned16(table)))
    detail::k_embedding_forward<T, W><<<detail::flat_grid(q, rows * D / W), detail::flat_threads, 0, q.stream()>>>(
        rows, D, ids, table, vocab_offset, vocab_local, out, detail::status_word(q));
  else
    detail::k_embedding_forward<T, 1><<<detail::flat_grid(q, rows * D), detail::flat_threads, 0, q.stream()>>>(
        rows, D, ids, table, vocab_offset, vocab_local, out, detail::status_word(q));
  STRATA_CUDA_CHECK_LAUNCH("k_embedding_forward");
}

// dtable[ids[r] - vocab_offset, :] += dout[r, :] for ids in this slice, rows
// of one id added in row order (deterministic, bit-identical to the host):
// a stable radix sort of (id, row) pairs groups each id's rows, then one
// block per id and column tile accumulates them. accumulate == false zeroes
// the vocab_local x D table first. T: dout (float, double, bf16); G: dtable
// and the accumulation (float or double; G = T for reals).
template <class T, class G>
void embedding_backward(queue& q, std::size_t rows, std::size_t D, const std::int32_t* ids, const T* dout,
                        std::size_t vocab_offset, std::size_t vocab_local, G* dtable, bool accumulate) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<G>);
  if (D == 0 || vocab_local == 0) return;
  detail::need(dtable && (rows == 0 || (ids && dout)), "embedding_backward", "null pointer");
  detail::need(rows <= std::size_t(INT_MAX) && vocab_local < std::size_t(UINT32_MAX) && D <= std::size_t(65535) * 128,
               "embedding_backward", "more than 2^31 rows, 2^32 table rows or 8M columns");
  if (!accumulate) STRATA_CUDA_CHECK(cudaMemsetAsync(dtable, 0, vocab_local * D * sizeof(G), q.stream()));
  if (rows == 0) return;
  const int n = static_cast<int>(rows);
  const int end_bit = detail::bits_for(vocab_local);
  std::size_t temp = 0;
  STRATA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp, static_cast<const std::uint32_t*>(nullptr),
                                                    static_cast<std::uint32_t*>(nullptr),
                                                    static_cast<const std::uint32_t*>(nullptr),
                                                    static_cast<std::uint32_t*>(nullptr), n, 0, end_bit, q.stream()));
  const std::size_t arr = rows * sizeof(std::uint32_t);
  detail::scratch sc = detail::get_scratch(q, detail::carve_bytes(arr, arr, arr, arr, temp));
  detail::carver cv{sc.p};
  auto* keys_in = cv.take<std::uint32_t>(rows);
  auto* rows_in = cv.take<std::uint32_t>(rows);
  auto* keys_out = cv.take<std::uint32_t>(rows);
  auto* rows_out = cv.take<std::uint32_t>(rows);
  void* temp_p = cv.take<unsigned char>(temp);
  detail::k_embedding_keys<std::int32_t><<<detail::flat_grid(q, rows), detail::flat_threads, 0, q.stream()>>>(
      rows, ids, vocab_offset, vocab_local, keys_in, rows_in, detail::status_word(q));
  STRATA_CUDA_CHECK_LAUNCH("k_embedding_keys");
  STRATA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp_p, temp, keys_in, keys_out, rows_in, rows_out, n, 0, end_bit,
                                                    q.stream()));
  const unsigned tile = 128;
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>((D + tile - 1) / tile));
  detail::k_embedding_accumulate<T, G><<<grid, tile, 0, q.stream()>>>(rows, D, keys_out, rows_out, dout,
                                                                      static_cast<std::uint32_t>(vocab_local), dtable);
  STRATA_CUDA_CHECK_LAUNCH("k_embedding_accumulate");
}

// ---------------------------------------------------------------------------
// BLAS-1 and reductions
// ---------------------------------------------------------------------------

namespace detail {

struct sum_op {
  __host__ __device__ double operator()(double a, double b) const { return a + b; }
};
struct to_double {
  template <class T>
  __host__ __device__ double operator()(T v) const {
    return double(v);
  }
};
struct square_double {
  template <class T>
  __host__ __device__ double operator()(T v) const {
    return double(v) * double(v);
  }
};

template <class T, class Op>
double reduce_to_host(queue& q, std::size_t n, const T* x, Op op, const char* name) {
  if (n == 0) return 0.0;
  need(x != nullptr, name, "null pointer");
  queue_state& s = q.state();
  double* out = &s.dev_slots->value;
  std::size_t temp = 0;
  STRATA_CUDA_CHECK(cub::DeviceReduce::TransformReduce(nullptr, temp, x, out, n, sum_op{}, op, 0.0, s.stream));
  scratch sc = get_scratch(q, temp);
  STRATA_CUDA_CHECK(cub::DeviceReduce::TransformReduce(sc.p, temp, x, out, n, sum_op{}, op, 0.0, s.stream));
  STRATA_CUDA_CHECK(cudaMemcpyAsync(&s.host_slots->value, out, sizeof(double), cudaMemcpyDeviceToHost, s.stream));
  q.synchronize();
  return s.host_slots->value;
}

template <class T, int W>
__global__ void k_scale(std::size_t n, T a, T* x) {
  using C = compute_t<T>;
  flat_loop<W>(n, [&](std::size_t i, auto w) {
    constexpr int V = decltype(w)::value;
    T v[V];
    load<V>(x + i, v);
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = T(C(v[k]) * C(a));
    store<V>(x + i, v);
  });
}

template <class T, int W>
__global__ void k_axpy(std::size_t n, T a, const T* x, T* y) {
  using C = compute_t<T>;
  flat_loop<W>(n, [&](std::size_t i, auto w) {
    constexpr int V = decltype(w)::value;
    T xv[V], yv[V];
    load<V>(x + i, xv);
    load<V>(y + i, yv);
#pragma unroll
    for (int k = 0; k < V; ++k) yv[k] = T(C(yv[k]) + C(a) * C(xv[k]));
    store<V>(y + i, yv);
  });
}

template <class T, int W>
__global__ void k_fill(std::size_t n, T value, T* x) {
  flat_loop<W>(n, [&](std::size_t i, auto w) {
    constexpr int V = decltype(w)::value;
    T v[V];
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = value;
    store<V>(x + i, v);
  });
}

template <class T, class U, U Mask>
__global__ void k_all_finite(std::size_t n, const T* x, unsigned int* flag) {
  bool bad = false;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    U bits;
    std::memcpy(&bits, x + i, sizeof bits);
    bad |= (bits & Mask) == Mask;
  }
  // Idempotent store of the same value: any order gives the same answer.
  if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1u;
}

// W elements of T in 16-byte pieces (one piece when W * sizeof(T) <= 16);
// p must be aligned to min(W * sizeof(T), 16) bytes.
template <int W, class T>
__device__ __forceinline__ void load_wide(const T* p, T (&r)[W]) {
  constexpr int P = W < vec_width<T> ? W : vec_width<T>;
  static_assert(W % P == 0);
#pragma unroll
  for (int c = 0; c < W; c += P) {
    T part[P];
    load<P>(p + c, part);
#pragma unroll
    for (int k = 0; k < P; ++k) r[c + k] = part[k];
  }
}
template <int W, class T>
__device__ __forceinline__ void store_wide(T* p, const T (&r)[W]) {
  constexpr int P = W < vec_width<T> ? W : vec_width<T>;
  static_assert(W % P == 0);
#pragma unroll
  for (int c = 0; c < W; c += P) {
    T part[P];
#pragma unroll
    for (int k = 0; k < P; ++k) part[k] = r[c + k];
    store<P>(p + c, part);
  }
}

// One conversion, as the host's cast_elements: to bf16 through float (a
// double rounds twice), everything else a plain conversion (exact or IEEE
// round to nearest).
template <class To, class From>
__device__ __forceinline__ To convert_element(From v) {
  if constexpr (std::is_same_v<To, bf16>)
    return bf16(static_cast<float>(v));
  else
    return static_cast<To>(v);
}

// W = elements per vector step: 16 bytes of the narrower type (the wider
// side moves in several 16-byte pieces).
template <class From, class To, int W>
__global__ void k_cast_elements(std::size_t n, const From* x, To* y) {
  flat_loop<W>(n, [&](std::size_t i, auto w) {
    constexpr int V = decltype(w)::value;
    From a[V];
    To b[V];
    load_wide<V>(x + i, a);
#pragma unroll
    for (int k = 0; k < V; ++k) b[k] = detail::convert_element<To>(a[k]);
    store_wide<V>(y + i, b);
  });
}

template <class T>
__global__ void k_cast_ids(std::size_t n, const T* values, std::int32_t* ids) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const double d = double(values[i]);
    // Representable after truncation iff -2^31 - 1 < d < 2^31; NaN fails both.
    ids[i] = (d > -2147483649.0 && d < 2147483648.0) ? static_cast<std::int32_t>(d) : INT32_MIN;
  }
}

}  // namespace detail

// Sum of x[0..n) in double (T: float, double, bf16). SYNCHRONIZES q
// (returns a host value).
template <class T>
double sum(queue& q, std::size_t n, const T* x) {
  static_assert(detail::is_elem_v<T>);
  return detail::reduce_to_host(q, n, x, detail::to_double{}, "sum");
}

// Sum of squares of x[0..n) in double (T: float, double, bf16). SYNCHRONIZES q.
template <class T>
double sum_squares(queue& q, std::size_t n, const T* x) {
  static_assert(detail::is_elem_v<T>);
  return detail::reduce_to_host(q, n, x, detail::square_double{}, "sum_squares");
}

// x *= alpha
template <class T>
void scale(queue& q, std::size_t n, double alpha, T* x) {
  static_assert(detail::is_elem_v<T>);
  if (n == 0) return;
  constexpr int W = detail::vec_width<T>;
  const T a = T(alpha);
  if (detail::aligned16(x))
    detail::k_scale<T, W><<<detail::flat_grid(q, n / W + 1), detail::flat_threads, 0, q.stream()>>>(n, a, x);
  else
    detail::k_scale<T, 1><<<detail::flat_grid(q, n), detail::flat_threads, 0, q.stream()>>>(n, a, x);
  STRATA_CUDA_CHECK_LAUNCH("k_scale");
}

// y += alpha * x
template <class T>
void axpy(queue& q, std::size_t n, double alpha, const T* x, T* y) {
  static_assert(detail::is_elem_v<T>);
  if (n == 0) return;
  constexpr int W = detail::vec_width<T>;
  const T a = T(alpha);
  if (detail::aligned16(x) && detail::aligned16(y))
    detail::k_axpy<T, W><<<detail::flat_grid(q, n / W + 1), detail::flat_threads, 0, q.stream()>>>(n, a, x, y);
  else
    detail::k_axpy<T, 1><<<detail::flat_grid(q, n), detail::flat_threads, 0, q.stream()>>>(n, a, x, y);
  STRATA_CUDA_CHECK_LAUNCH("k_axpy");
}

// y = x (non-overlapping). Either side may also be host memory (the runtime
// infers the direction); a copy involving pageable host memory may block.
template <class T>
void copy(queue& q, std::size_t n, const T* x, T* y) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (n == 0) return;
  STRATA_CUDA_CHECK(cudaMemcpyAsync(y, x, n * sizeof(T), cudaMemcpyDefault, q.stream()));
}

// dst[r, 0..cols) = src[r, 0..cols) for rows with leading dimensions ld_src,
// ld_dst (elements, >= cols). One cudaMemcpy2DAsync; host pointers allowed
// as for copy.
template <class T>
void copy_2d(queue& q, std::size_t rows, std::size_t cols, const T* src, std::size_t ld_src, T* dst,
             std::size_t ld_dst) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (rows * cols == 0) return;
  detail::need(src && dst, "copy_2d", "null pointer");
  detail::need(ld_src >= cols && ld_dst >= cols, "copy_2d", "leading dimension smaller than cols");
  STRATA_CUDA_CHECK(cudaMemcpy2DAsync(dst, ld_dst * sizeof(T), src, ld_src * sizeof(T), cols * sizeof(T), rows,
                                      cudaMemcpyDefault, q.stream()));
}

// x = value (cudaMemsetAsync when the value is all zero bytes).
template <class T>
void fill(queue& q, std::size_t n, T value, T* x) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (n == 0) return;
  unsigned char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  if (std::all_of(bytes, bytes + sizeof(T), [](unsigned char b) { return b == 0; })) {
    STRATA_CUDA_CHECK(cudaMemsetAsync(x, 0, n * sizeof(T), q.stream()));
    return;
  }
  constexpr int W = detail::vec_width<T>;
  if (W > 1 && detail::aligned16(x))
    detail::k_fill<T, W><<<detail::flat_grid(q, n / W + 1), detail::flat_threads, 0, q.stream()>>>(n, value, x);
  else
    detail::k_fill<T, 1><<<detail::flat_grid(q, n), detail::flat_threads, 0, q.stream()>>>(n, value, x);
  STRATA_CUDA_CHECK_LAUNCH("k_fill");
}

namespace detail {
// Exponent bits of T (all set: NaN or +-Inf), as an unsigned of T's size.
template <class T>
struct exponent_mask;
template <>
struct exponent_mask<bf16> {
  using type = std::uint16_t;
  static constexpr type value = 0x7f80u;
};
template <>
struct exponent_mask<float> {
  using type = std::uint32_t;
  static constexpr type value = 0x7f800000u;
};
template <>
struct exponent_mask<double> {
  using type = std::uint64_t;
  static constexpr type value = 0x7ff0000000000000ull;
};
}  // namespace detail

// True iff no element is NaN or +-Inf (exponent-bit test; T: float, double,
// bf16). SYNCHRONIZES q. Ordinary host memory is accepted and checked on the
// host.
template <class T>
bool all_finite(queue& q, std::size_t n, const T* x) {
  static_assert(detail::is_elem_v<T>);
  using U = typename detail::exponent_mask<T>::type;
  constexpr U mask = detail::exponent_mask<T>::value;
  static_assert(sizeof(U) == sizeof(T));
  if (n == 0) return true;
  detail::need(x != nullptr, "all_finite", "null pointer");
  if (detail::host_only_pointer(x)) {
    for (std::size_t i = 0; i < n; ++i) {
      U bits;
      std::memcpy(&bits, x + i, sizeof bits);
      if ((bits & mask) == mask) return false;
    }
    return true;
  }
  detail::queue_state& s = q.state();
  unsigned int* flag = &s.dev_slots->flag;
  STRATA_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof *flag, s.stream));
  detail::k_all_finite<T, U, mask><<<detail::flat_grid(q, n), detail::flat_threads, 0, s.stream>>>(n, x, flag);
  STRATA_CUDA_CHECK_LAUNCH("k_all_finite");
  STRATA_CUDA_CHECK(cudaMemcpyAsync(&s.host_slots->flag, flag, sizeof *flag, cudaMemcpyDeviceToHost, s.stream));
  q.synchronize();
  return s.host_slots->flag == 0u;
}

// y[i] = To(x[i]) for From, To in {float, double, bf16}: to bf16 rounds to
// nearest even (from double via float, as the host: two roundings), bf16 ->
// float/double and float -> double are exact, double -> float rounds to
// nearest: the host's bits, except that a NaN's payload may differ. y must
// not overlap x. Enqueued on q's stream (graph-capturable);
// 16-byte vector loads and stores when x and y are both 16-byte aligned.
template <class From, class To>
void cast_elements(queue& q, std::size_t n, const From* x, To* y) {
  static_assert(detail::is_elem_v<From> && detail::is_elem_v<To>);
  if (n == 0) return;
  detail::need(x && y, "cast_elements", "null pointer");
  constexpr int W = int(16 / (sizeof(From) < sizeof(To) ? sizeof(From) : sizeof(To)));
  if (detail::aligned16(x) && detail::aligned16(y))
    detail::k_cast_elements<From, To, W>
        <<<detail::flat_grid(q, n / W + 1), detail::flat_threads, 0, q.stream()>>>(n, x, y);
  else
    detail::k_cast_elements<From, To, 1><<<detail::flat_grid(q, n), detail::flat_threads, 0, q.stream()>>>(n, x, y);
  STRATA_CUDA_CHECK_LAUNCH("k_cast_elements");
}

// ids[i] = values[i] truncated toward zero (ids carried as values of T).
// NaN and values whose truncation does not fit int32 become INT32_MIN, which
// check_ids then reports.
template <class T>
void cast_ids(queue& q, std::size_t n, const T* values, std::int32_t* ids) {
  static_assert(detail::is_real_v<T>);
  if (n == 0) return;
  detail::need(values && ids, "cast_ids", "null pointer");
  detail::k_cast_ids<T><<<detail::flat_grid(q, n), detail::flat_threads, 0, q.stream()>>>(n, values, ids);
  STRATA_CUDA_CHECK_LAUNCH("k_cast_ids");
}

// ---------------------------------------------------------------------------
// Optimizers: PyTorch semantics and operation order, as the host kernels.
// The *_multi forms update many tensors in one launch: tensor pointers and
// sizes travel in the kernel's parameter block (up to 64 tensors per launch,
// more tensors -> more launches), each block takes a 16384-element chunk of
// one tensor, found by binary search over the tensors' first-chunk indices.
// ---------------------------------------------------------------------------

template <class T>
struct adam_tensor {
  T* param;
  const T* grad;
  T* m;
  T* v;
  std::size_t n;
};

template <class T>
struct sgd_tensor {
  T* param;
  const T* grad;
  T* velocity;  // may be null when momentum == 0
  std::size_t n;
};

namespace detail {

inline constexpr int multi_max_tensors = 64;
inline constexpr std::size_t multi_chunk = 16384;
inline constexpr unsigned multi_threads = 256;

template <class T>
struct adam_scalars {
  T neg_step_size, bc2_sqrt, w1, b2, w2, eps, wd, decay;
  bool use_wd, decoupled, lerp_low;
};
template <class T>
struct sgd_scalars {
  T neg_lr, mu, wd;
  bool use_wd, use_mom;
};

// Kernel parameter block (< 4 KiB, the portable parameter limit).
template <class T, int Arrays>
struct multi_args {
  T* ptr[Arrays][multi_max_tensors];
  std::uint64_t n[multi_max_tensors];
  std::uint32_t first[multi_max_tensors + 1];  // first chunk (block) of each tensor; [count] = total
  int count;
};
static_assert(sizeof(multi_args<double, 4>) + sizeof(adam_scalars<double>) < 4000);

template <class T>
__device__ __forceinline__ void adam_update(T& p, T g, T& m, T& v, const adam_scalars<T>& s) {
  if (s.use_wd) {
    if (s.decoupled)
      p = p * s.decay;
    else
      g = g + s.wd * p;
  }
  const T mi = m;
  const T mn = s.lerp_low ? mi + s.w1 * (g - mi) : g - (g - mi) * (T(1) - s.w1);
  const T vn = v * s.b2 + s.w2 * g * g;
  const T denom = d_sqrt(vn) / s.bc2_sqrt + s.eps;
  m = mn;
  v = vn;
  p = p + s.neg_step_size * (mn / denom);
}

template <class T>
__device__ __forceinline__ void sgd_update(T& p, T g, T* vel, const sgd_scalars<T>& s) {
  if (s.use_wd) g = g + s.wd * p;
  if (s.use_mom) {
    *vel = *vel * s.mu + g;
    g = *vel;
  }
  p = p + s.neg_lr * g;
}

template <int Arrays, class T>
__device__ __forceinline__ int owning_tensor(const multi_args<T, Arrays>& a) {
  int lo = 0, hi = a.count - 1;
  const std::uint32_t b = blockIdx.x;
  while (lo < hi) {  // last tensor whose first chunk <= b
    const int mid = (lo + hi + 1) / 2;
    if (a.first[mid] <= b)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// Arrays: 0 param, 1 grad, 2 m / velocity, 3 v.
template <class T>
__global__ void __launch_bounds__(multi_threads)
    k_adam_multi(const __grid_constant__ multi_args<T, 4> a, const adam_scalars<T> s) {
  const int t = owning_tensor(a);
  T* p = a.ptr[0][t];
  const T* g = a.ptr[1][t];
  T* m = a.ptr[2][t];
  T* v = a.ptr[3][t];
  const std::size_t begin = std::size_t(blockIdx.x - a.first[t]) * multi_chunk;
  const std::size_t end = d_min(a.n[t], begin + multi_chunk);
  constexpr int W = vec_width<T>;
  const bool vec = aligned16(p) && aligned16(g) && aligned16(m) && aligned16(v);  // uniform per block
  std::size_t i = begin + std::size_t(threadIdx.x) * W;
  if (vec) {
    for (; i + W <= end; i += std::size_t(blockDim.x) * W) {
      T pv[W], gv[W], mv[W], vv[W];
      load<W>(p + i, pv);
      load<W>(g + i, gv);
      load<W>(m + i, mv);
      load<W>(v + i, vv);
#pragma unroll
      for (int k = 0; k < W; ++k) adam_update(pv[k], gv[k], mv[k], vv[k], s);
      store<W>(p + i, pv);
      store<W>(m + i, mv);
      store<W>(v + i, vv);
    }
    // The chunk's tail (< W elements, only in a tensor's last chunk).
    const std::size_t tail = begin + (end - begin) / W * W;
    for (std::size_t j = tail + threadIdx.x; j < end; j += blockDim.x) adam_update(p[j], g[j], m[j], v[j], s);
  } else {
    for (std::size_t j = begin + threadIdx.x; j < end; j += blockDim.x) adam_update(p[j], g[j], m[j], v[j], s);
  }
}

template <class T>
__global__ void __launch_bounds__(multi_threads)
    k_sgd_multi(const __grid_constant__ multi_args<T, 3> a, const sgd_scalars<T> s) {
  const int t = owning_tensor(a);
  T* p = a.ptr[0][t];
  const T* g = a.ptr[1][t];
  T* vel = a.ptr[2][t];
  const std::size_t begin = std::size_t(blockIdx.x - a.first[t]) * multi_chunk;
  const std::size_t end = d_min(a.n[t], begin + multi_chunk);
  T dummy = T(0);
  for (std::size_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
    T pj = p[j];
    sgd_update(pj, g[j], s.use_mom ? vel + j : &dummy, s);
    p[j] = pj;
  }
}

// Packs tensors into parameter blocks and launches one kernel per block.
template <class T, int Arrays, class Tensor, class Pointers, class Launch>
void launch_multi(queue& q, std::span<const Tensor> tensors, Pointers pointers, Launch launch) {
  multi_args<T, Arrays> a{};
  std::uint32_t chunks = 0;
  const auto flush = [&] {
    if (a.count == 0) return;
    a.first[a.count] = chunks;
    launch(a, chunks);
    a = multi_args<T, Arrays>{};
    chunks = 0;
  };
  for (const Tensor& t : tensors) {
    if (t.n == 0) continue;
    const std::size_t c = (t.n + multi_chunk - 1) / multi_chunk;
    if (c > (std::size_t(1) << 30)) fail("optimizer", "tensor too large for one launch");
    if (a.count == multi_max_tensors || std::size_t(chunks) + c > (std::size_t(1) << 31) - 1) flush();
    const auto ptrs = pointers(t);
    for (int k = 0; k < Arrays; ++k) a.ptr[k][a.count] = ptrs[k];
    a.n[a.count] = t.n;
    a.first[a.count] = chunks;
    chunks += static_cast<std::uint32_t>(c);
    ++a.count;
  }
  flush();
  (void)q;
}

}  // namespace detail

// torch.optim.Adam / AdamW over many tensors in few launches (see the host
// adam_step for the update). step counts updates from 1.
template <class T>
void adam_step_multi(queue& q, std::span<const adam_tensor<T>> tensors, double lr, double beta1, double beta2,
                     double eps, double weight_decay, std::int64_t step, bool decoupled) {
  static_assert(detail::is_real_v<T>);
  if (step < 1) detail::fail("adam_step", "step counts updates from 1");
  for (const adam_tensor<T>& t : tensors)
    detail::need(t.n == 0 || (t.param && t.grad && t.m && t.v), "adam_step", "null pointer");
  // Scalars exactly as the host computes them (bias corrections in double).
  const double bc1 = 1.0 - std::pow(beta1, double(step));
  const double bc2 = 1.0 - std::pow(beta2, double(step));
  detail::adam_scalars<T> s;
  s.neg_step_size = T(-(lr / bc1));
  s.bc2_sqrt = T(std::sqrt(bc2));
  s.w1 = T(1.0 - beta1);
  s.b2 = T(beta2);
  s.w2 = T(1.0 - beta2);
  s.eps = T(eps);
  s.wd = T(weight_decay);
  s.decay = T(1.0 - lr * weight_decay);
  s.use_wd = weight_decay != 0.0;
  s.decoupled = decoupled;
  s.lerp_low = (1.0 - beta1) < 0.5;
  detail::launch_multi<T, 4>(
      q, tensors,
      [](const adam_tensor<T>& t) {
        return std::array<T*, 4>{t.param, const_cast<T*>(t.grad), t.m, t.v};  // grad is only read
      },
      [&](const detail::multi_args<T, 4>& a, std::uint32_t blocks) {
        detail::k_adam_multi<T><<<blocks, detail::multi_threads, 0, q.stream()>>>(a, s);
        STRATA_CUDA_CHECK_LAUNCH("k_adam_multi");
      });
}

// One tensor: the same kernel with a single entry.
template <class T>
void adam_step(queue& q, std::size_t n, double lr, double beta1, double beta2, double eps, double weight_decay,
               std::int64_t step, T* param, const T* grad, T* m, T* v, bool decoupled) {
  const adam_tensor<T> t{param, grad, m, v, n};
  adam_step_multi<T>(q, std::span<const adam_tensor<T>>(&t, 1), lr, beta1, beta2, eps, weight_decay, step,
                     decoupled);
}

// torch.optim.SGD (dampening 0, no Nesterov) over many tensors.
template <class T>
void sgd_momentum_step_multi(queue& q, std::span<const sgd_tensor<T>> tensors, double lr, double momentum,
                             double weight_decay) {
  static_assert(detail::is_real_v<T>);
  for (const sgd_tensor<T>& t : tensors)
    detail::need(t.n == 0 || (t.param && t.grad && (t.velocity || momentum == 0.0)), "sgd_momentum_step",
                 "null pointer");
  detail::sgd_scalars<T> s;
  s.neg_lr = T(-lr);
  s.mu = T(momentum);
  s.wd = T(weight_decay);
  s.use_wd = weight_decay != 0.0;
  s.use_mom = momentum != 0.0;
  detail::launch_multi<T, 3>(
      q, tensors, [](const sgd_tensor<T>& t) { return std::array<T*, 3>{t.param, const_cast<T*>(t.grad), t.velocity}; },
      [&](const detail::multi_args<T, 3>& a, std::uint32_t blocks) {
        detail::k_sgd_multi<T><<<blocks, detail::multi_threads, 0, q.stream()>>>(a, s);
        STRATA_CUDA_CHECK_LAUNCH("k_sgd_multi");
      });
}

template <class T>
void sgd_momentum_step(queue& q, std::size_t n, double lr, double momentum, double weight_decay, T* param,
                       const T* grad, T* velocity) {
  const sgd_tensor<T> t{param, grad, velocity, n};
  sgd_momentum_step_multi<T>(q, std::span<const sgd_tensor<T>>(&t, 1), lr, momentum, weight_decay);
}

// ---------------------------------------------------------------------------
// GEMM with fused bias + activation (Linear forward)
// ---------------------------------------------------------------------------

// pre = alpha * op(A) op(B) + beta * C + bias (bias: length N, may be null);
// pre_out (ld = ldc, may be null; must not be C unless act == none) receives
// pre; C = act(pre). Equivalent to gemm then bias_activation_forward, but the
// bias and the activation ride cuBLASLt's epilogue where it has one:
//   none        BIAS epilogue (pre_out, if asked, is a copy of C)
//   relu        RELU_BIAS; with pre_out: BIAS epilogue into pre_out, then relu
//   gelu        GELU(_AUX)_BIAS when q.lt_gelu_epilogue(), else unfused
// and falls back to the unfused pair when cuBLASLt has no algorithm.
// T: float, double, bf16 (alpha/beta in float for bf16).
template <class T>
  requires detail::is_elem_v<T>
void gemm_bias_act(queue& q, trans trans_a, trans trans_b, std::size_t M, std::size_t N, std::size_t K,
                   gemm_scalar_t<T> alpha, const T* A, std::size_t lda, const T* B, std::size_t ldb,
                   gemm_scalar_t<T> beta, T* C, std::size_t ldc, const T* bias, activation act, T* pre_out) {
  using S = gemm_scalar_t<T>;
  if (M == 0 || N == 0) return;
  const bool reads_ab =
      detail::check_gemm_args(trans_a, trans_b, M, N, K, alpha == S(0), A, lda, B, ldb, C, ldc);
  if (pre_out == C && act != activation::none) detail::bad_gemm_arg("pre_out must not alias C when act != none");
  if (!reads_ab) {
    detail::scale_matrices(q, 1, M, N, C, ldc, 0, beta);
    detail::bias_act_2d(q, act, M, N, C, ldc, bias, pre_out, ldc, C, ldc);
    return;
  }
  detail::lt_call c =
      detail::make_call<T, T, S>(q, trans_a, trans_b, M, N, K, &alpha, A, lda, 0, B, ldb, 0, &beta, C, ldc, 0, 1);
  c.bias = bias;
  bool done = false;
  if (act == activation::none) {
    c.epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    done = detail::lt_matmul(q, c);
    if (done && pre_out && pre_out != C) copy_2d(q, M, N, static_cast<const T*>(C), ldc, pre_out, ldc);
  } else if (act == activation::relu && !pre_out) {
    c.epilogue = bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    done = detail::lt_matmul(q, c);
  } else if (act == activation::relu) {
    c.epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    c.D = pre_out;  // D != C: cuBLASLt reads C (beta) and writes pre_out
    done = detail::lt_matmul(q, c);
    if (done)
      detail::bias_act_2d(q, act, M, N, static_cast<const T*>(pre_out), ldc, static_cast<const T*>(nullptr),
                          static_cast<T*>(nullptr), ldc, C, ldc);
  } else if (act == activation::gelu && q.lt_gelu_epilogue()) {
    if (!pre_out) {
      c.epilogue = bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
      done = detail::lt_matmul(q, c);
    } else if (ldc % 8 == 0) {  // cuBLASLt's requirement on the aux leading dimension
      c.epilogue = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
      c.aux = pre_out;
      c.aux_ld = ldc;
      done = detail::lt_matmul(q, c);
    }
  }
  if (!done) {
    detail::lt_call plain =
        detail::make_call<T, T, S>(q, trans_a, trans_b, M, N, K, &alpha, A, lda, 0, B, ldb, 0, &beta, C, ldc, 0, 1);
    (void)detail::lt_matmul(q, plain);
    detail::bias_act_2d(q, act, M, N, static_cast<const T*>(C), ldc, bias, pre_out, ldc, C, ldc);
  }
}

// Weight and bias gradients of a Linear layer (X: rows x K, dY: rows x N,
// row-major):
//   dW (K x N, ldw) = X^T dY + beta * dW
//   dbias (N)       = (accumulate ? dbias : 0) + column sums of dY
// in one cuBLASLt call: the BGRADA epilogue sums dY (Lt's A operand) while
// the product streams it, saving bias_grad's separate pass over dY. The sums
// accumulate in the GEMM's compute type (FP32; TF32 inputs in TF32 mode), not
// in double like bias_grad, so this is opt-in. Falls back to gemm +
// bias_grad when cuBLASLt has no algorithm. T: float or double.
template <class T>
  requires detail::is_real_v<T>
void gemm_wgrad_bias(queue& q, std::size_t rows, std::size_t K, std::size_t N, const T* X, std::size_t ldx,
                     const T* dY, std::size_t ldy, T beta, T* dW, std::size_t ldw, T* dbias, bool accumulate) {
  if (K == 0 || N == 0) return;
  detail::need(dbias != nullptr, "gemm_wgrad_bias", "null dbias");
  const T one = T(1);
  bool done = false;
  if (rows > 0) {
    (void)detail::check_gemm_args(trans::T, trans::N, K, N, rows, false, X, ldx, dY, ldy, dW, ldw);
    detail::lt_call c = detail::make_call<T, T, T>(q, trans::T, trans::N, K, N, rows, &one, X, ldx, 0, dY, ldy, 0,
                                                   &beta, dW, ldw, 0, 1);
    c.epilogue = CUBLASLT_EPILOGUE_BGRADA;
    // The epilogue overwrites its output: when accumulating, it goes to the
    // end of the workspace (kept out of the matmul's share), then is added.
    const std::size_t reserve = detail::round_up(N * sizeof(T), alignment);
    T* tmp = dbias;
    if (accumulate && reserve * 4 <= q.workspace_bytes()) {
      c.workspace_reserve = reserve;
      tmp = reinterpret_cast<T*>(static_cast<unsigned char*>(q.workspace()) + q.workspace_bytes() - reserve);
    }
    if (!accumulate || tmp != dbias) {
      c.bias = tmp;
      done = detail::lt_matmul(q, c);
      if (done && accumulate) axpy(q, N, 1.0, static_cast<const T*>(tmp), dbias);
    }
  }
  if (!done) {
    gemm(q, trans::T, trans::N, K, N, rows, one, X, ldx, dY, ldy, beta, dW, ldw);
    bias_grad(q, rows, N, dY, dbias, accumulate);
  }
}

}  // namespace strata::backend::cuda
