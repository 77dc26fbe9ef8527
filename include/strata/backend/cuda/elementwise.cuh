// strata-header: cuda-only
#pragma once
// strata CUDA backend, elementwise kernels (as host/elementwise.hpp): bias +
// activation forward, activation backward (strata/core/math.hpp's formulas),
// scale/axpy/add/copy/fill, casts between element types, strided copies, token-id casts.
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

// y = act(x + bias) over rows x cols; bias may be null; pre_out (may be null)
// receives x + bias. pre_out and y may each alias x. T: float, double, bf16, f16.
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

namespace detail {

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

// x *= alpha (bf16, f16: in float, alpha rounded to T first, as the host does)
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

// y += alpha * x (bf16, f16: in float, alpha rounded to T first)
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

// y = a + b, n elements, in compute_t<T> (one rounding for bf16, f16); y may alias a or b.
template <class T>
void add(queue& q, std::size_t n, const T* a, const T* b, T* y) {
  static_assert(detail::is_elem_v<T>);
  if (n == 0) return;
  detail::need(a && b && y, "add", "null pointer");
  constexpr int W = detail::vec_width<T>;
  if (detail::aligned16(a) && detail::aligned16(b) && detail::aligned16(y))
    detail::k_add<T, W><<<detail::flat_grid(q, n / W + 1), detail::flat_threads, 0, q.stream()>>>(n, a, b, y);
  else
    detail::k_add<T, 1><<<detail::flat_grid(q, n), detail::flat_threads, 0, q.stream()>>>(n, a, b, y);
  STRATA_CUDA_CHECK_LAUNCH("k_add");
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

// y[i] = To(x[i]) for From, To in {float, double, bf16, f16}: to bf16 or f16
// rounds to nearest even (from double via float, as the host: two roundings),
// bf16/f16 -> float/double and float -> double are exact, double -> float rounds to
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

}  // namespace strata::backend::cuda
