// strata-header: cuda-only
#pragma once
// strata CUDA backend: what every CUDA kernel family shares. Each family header
// implements its front (backend/<family>.hpp: signature, contract, argument checks;
// see backend/dispatch.hpp) for a cuda::queue and device pointers, as static members
// of a struct the front's impl::<family>_kernels<cuda::queue> derives from.
//
// Everything is enqueued on the queue's stream and returns without waiting, EXCEPT
// (each front says so):
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
// Types: strata::bf16 / strata::f16 are cuBLASLt's CUDA_R_16BF / CUDA_R_16F.
// Numerics follow the host backend: elementwise work in compute_t<T> (T for
// float/double, float for bf16 and f16), long reductions (row statistics, softmax
// denominators, column sums, whole-tensor sums) accumulate in double. The
// device's expf/tanhf differ from libm by an ulp or two, so results agree
// with the host to rounding, not bit for bit (16-bit outputs: to one ulp of
// their type). Copies and cast_elements are bit-identical to the host (a NaN stays
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
//
// This header: the device helpers every family shares (vector loads, grid-stride
// loops, deterministic group reductions, scratch, the device error word).
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

#include "strata/backend/cuda/cuda.hpp"
#include "strata/backend/cuda/launch.cuh"
#include "strata/backend/dispatch.hpp"
#include "strata/core/math.hpp"
#include "strata/core/precision.hpp"

namespace strata::backend::cuda {

namespace detail {

using backend::detail::compute_t;
using backend::detail::fail;
using backend::detail::is_elem_v;
using backend::detail::is_real_v;
using backend::detail::need;

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
__device__ __forceinline__ T d_log(T x) {
  if constexpr (std::is_same_v<T, float>)
    return logf(x);
  else
    return log(x);
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
    return T::from_bits(T::quiet_nan_bits);  // bf16, f16
}
// +0 as bit pattern for bf16 and f16 (their float constructors are an instruction).
template <class T>
__device__ __forceinline__ T d_zero() {
  if constexpr (is_half16_v<T>)
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
  // Two sums in one pass (sm holds 2 * warps): the same additions, in the same
  // order, as two sum() calls, with half the barriers.
  template <class V>
  __device__ static void sum2(V& a, V& b, V* sm) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      a += __shfl_xor_sync(0xffffffffu, a, o);
      b += __shfl_xor_sync(0xffffffffu, b, o);
    }
    if constexpr (warps > 1) {
      const int lane = threadIdx.x & 31, w = int(threadIdx.x % TH) / 32;
      if (lane == 0) {
        sm[w] = a;
        sm[warps + w] = b;
      }
      __syncthreads();
      V ta = sm[0], tb = sm[warps];
#pragma unroll
      for (int i = 1; i < warps; ++i) {
        ta += sm[i];
        tb += sm[warps + i];
      }
      __syncthreads();
      a = ta;
      b = tb;
    }
  }
  // NaN never wins a comparison, matching the host's `x > m ? x : m` scans.
  template <class V>
  __device__ static V max(V v, V* sm) {
    return reduce(v, sm, [](V a, V b) { return b > a ? b : a; });
  }
};

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
  // The host's check_labels error (which says "label" for ids too).
  throw backend::detail::bad_label(detail::kernel_name(st.kernel), label, static_cast<std::size_t>(row), st.lo,
                                   st.hi);
}

}  // namespace strata::backend::cuda
