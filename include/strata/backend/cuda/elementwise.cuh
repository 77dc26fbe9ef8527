// strata-header: cuda-only
#pragma once
// strata CUDA backend, elementwise kernels: the CUDA implementation of
// backend/elementwise.hpp (contracts and checks there). Grid-stride loops with 16-byte
// vector loads and stores where every pointer is 16-byte aligned.
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

#include "strata/backend/cuda/device.cuh"
#include "strata/backend/elementwise.hpp"

namespace strata::backend::cuda {

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
      yv[k] = T(math::act_forward(act, s));
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
        o[k] = T(C(g[k]) * math::act_derivative(act, C(p[k])));
    }
    store<V>(dx + i, o);
  });
}

}  // namespace detail

namespace detail {

// W elements of one row per thread (cols % W == 0): the row's key is hashed once per W
// elements, the row's sample and position found in 32 bits when the rows allow.
template <class T, int W>
__global__ void k_dropout(dropout_args a, std::size_t rows, std::size_t cols, const T* x, T* y) {
  using C = compute_t<T>;
  const std::uint64_t key = *a.key;
  const C s = C(a.scale);
  const std::size_t vpr = cols / W, total = rows * vpr;
  const bool small = total <= 0xffffffffull;
  const bool small_rows = a.row0 + rows <= 0xffffffffull && a.sample_rows <= 0xffffffffull;
  for (std::size_t v = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; v < total;
       v += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t r = d_div(v, vpr, small), c = (v - r * vpr) * W;
    const std::size_t m = a.row0 + r, sample = d_div(m, a.sample_rows, small_rows);
    const std::uint64_t rk = a.row_key_at(key, sample, m - sample * a.sample_rows);
    T xv[W], yv[W];
    load<W>(x + r * cols + c, xv);
#pragma unroll
    for (int k = 0; k < W; ++k) yv[k] = T(math::dropout_value(C(xv[k]), a.keep(rk, c + k), s));
    store<W>(y + r * cols + c, yv);
  }
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
__global__ void k_add(std::size_t n, const T* a, const T* b, T* y) {
  using C = compute_t<T>;
  flat_loop<W>(n, [&](std::size_t i, auto w) {
    constexpr int V = decltype(w)::value;
    T av[V], bv[V];
    load<V>(a + i, av);
    load<V>(b + i, bv);
#pragma unroll
    for (int k = 0; k < V; ++k) av[k] = T(C(av[k]) + C(bv[k]));
    store<V>(y + i, av);
  });
}

template <class F, class T, class... X>
__global__ void k_map(std::size_t n, F f, T* y, const X*... x) {
  flat_loop<1>(n, [&](std::size_t i, auto) { y[i] = T(f(compute_t<X>(x[i])...)); });
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

// One conversion, as the host's cast_elements: to bf16 or f16 through float (a
// double rounds twice), everything else a plain conversion (exact or IEEE
// round to nearest).
template <class To, class From>
__device__ __forceinline__ To convert_element(From v) {
  if constexpr (is_half16_v<To>)
    return To(static_cast<float>(v));
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

// Static members on arguments the front has checked (impl::elementwise_kernels<queue>).
struct elementwise_kernels {
  template <class T>
  static void bias_activation_forward(queue& q, activation act, std::size_t rows, std::size_t cols, const T* x,
                                      const T* bias, T* pre_out, T* y) {
    detail::bias_act_2d(q, act, rows, cols, x, cols, bias, pre_out, cols, y, cols);
  }

  template <class T>
  static void activation_backward(queue& q, activation act, std::size_t n, const T* pre, const T* dy, T* dx) {
    constexpr int W = detail::vec_width<T>;
    if (detail::aligned16(dy) && detail::aligned16(dx) && (!pre || detail::aligned16(pre)))
      detail::k_activation_backward<T, W>
          <<<detail::flat_grid(q, n / W + 1), detail::flat_threads, 0, q.stream()>>>(act, n, pre, dy, dx);
    else
      detail::k_activation_backward<T, 1>
          <<<detail::flat_grid(q, n), detail::flat_threads, 0, q.stream()>>>(act, n, pre, dy, dx);
    STRATA_CUDA_CHECK_LAUNCH("k_activation_backward");
  }

  template <class T>
  static void dropout(queue& q, const dropout_args& a, std::size_t rows, std::size_t cols, const T* x, T* y) {
    constexpr int W = detail::vec_width<T>;
    if (cols % W == 0 && detail::aligned16(x) && detail::aligned16(y))
      detail::k_dropout<T, W><<<detail::flat_grid(q, rows * cols / W), detail::flat_threads, 0, q.stream()>>>(
          a, rows, cols, x, y);
    else
      detail::k_dropout<T, 1><<<detail::flat_grid(q, rows * cols), detail::flat_threads, 0, q.stream()>>>(
          a, rows, cols, x, y);
    STRATA_CUDA_CHECK_LAUNCH("k_dropout");
  }

  // alpha rounded to T first, as the host does
  template <class T>
  static void scale(queue& q, std::size_t n, double alpha, T* x) {
    constexpr int W = detail::vec_width<T>;
    const T a = T(alpha);
    if (detail::aligned16(x))
      detail::k_scale<T, W><<<detail::flat_grid(q, n / W + 1), detail::flat_threads, 0, q.stream()>>>(n, a, x);
    else
      detail::k_scale<T, 1><<<detail::flat_grid(q, n), detail::flat_threads, 0, q.stream()>>>(n, a, x);
    STRATA_CUDA_CHECK_LAUNCH("k_scale");
  }

  template <class T>
  static void axpy(queue& q, std::size_t n, double alpha, const T* x, T* y) {
    constexpr int W = detail::vec_width<T>;
    const T a = T(alpha);
    if (detail::aligned16(x) && detail::aligned16(y))
      detail::k_axpy<T, W><<<detail::flat_grid(q, n / W + 1), detail::flat_threads, 0, q.stream()>>>(n, a, x, y);
    else
      detail::k_axpy<T, 1><<<detail::flat_grid(q, n), detail::flat_threads, 0, q.stream()>>>(n, a, x, y);
    STRATA_CUDA_CHECK_LAUNCH("k_axpy");
  }

  template <class T>
  static void add(queue& q, std::size_t n, const T* a, const T* b, T* y) {
    constexpr int W = detail::vec_width<T>;
    if (detail::aligned16(a) && detail::aligned16(b) && detail::aligned16(y))
      detail::k_add<T, W><<<detail::flat_grid(q, n / W + 1), detail::flat_threads, 0, q.stream()>>>(n, a, b, y);
    else
      detail::k_add<T, 1><<<detail::flat_grid(q, n), detail::flat_threads, 0, q.stream()>>>(n, a, b, y);
    STRATA_CUDA_CHECK_LAUNCH("k_add");
  }

  template <class T, class F, class... X>
  static void map(queue& q, std::size_t n, F f, T* y, const X*... x) {
    detail::k_map<F, T, X...><<<detail::flat_grid(q, n), detail::flat_threads, 0, q.stream()>>>(n, f, y, x...);
    STRATA_CUDA_CHECK_LAUNCH("k_map");
  }

  // Either side may also be host memory (the runtime infers the direction); a copy
  // involving pageable host memory may block.
  template <class T>
  static void copy(queue& q, std::size_t n, const T* x, T* y) {
    STRATA_CUDA_CHECK(cudaMemcpyAsync(y, x, n * sizeof(T), cudaMemcpyDefault, q.stream()));
  }

  // One cudaMemcpy2DAsync; host pointers allowed as for copy.
  template <class T>
  static void copy_2d(queue& q, std::size_t rows, std::size_t cols, const T* src, std::size_t ld_src, T* dst,
                      std::size_t ld_dst) {
    STRATA_CUDA_CHECK(cudaMemcpy2DAsync(dst, ld_dst * sizeof(T), src, ld_src * sizeof(T), cols * sizeof(T), rows,
                                        cudaMemcpyDefault, q.stream()));
  }

  // cudaMemsetAsync when the value is all zero bytes.
  template <class T>
  static void fill(queue& q, std::size_t n, T value, T* x) {
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

  // W = 16 bytes of the narrower type per vector step.
  template <class From, class To>
  static void cast_elements(queue& q, std::size_t n, const From* x, To* y) {
    constexpr int W = int(16 / (sizeof(From) < sizeof(To) ? sizeof(From) : sizeof(To)));
    if (detail::aligned16(x) && detail::aligned16(y))
      detail::k_cast_elements<From, To, W>
          <<<detail::flat_grid(q, n / W + 1), detail::flat_threads, 0, q.stream()>>>(n, x, y);
    else
      detail::k_cast_elements<From, To, 1>
          <<<detail::flat_grid(q, n), detail::flat_threads, 0, q.stream()>>>(n, x, y);
    STRATA_CUDA_CHECK_LAUNCH("k_cast_elements");
  }

  template <class T>
  static void cast_ids(queue& q, std::size_t n, const T* values, std::int32_t* ids) {
    detail::k_cast_ids<T><<<detail::flat_grid(q, n), detail::flat_threads, 0, q.stream()>>>(n, values, ids);
    STRATA_CUDA_CHECK_LAUNCH("k_cast_ids");
  }
};

}  // namespace strata::backend::cuda

namespace strata::backend::impl {
template <>
struct elementwise_kernels<cuda::queue> : cuda::elementwise_kernels {};
}  // namespace strata::backend::impl
