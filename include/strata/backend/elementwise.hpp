#pragma once
// The elementwise kernel family's front (dispatch.hpp): bias + activation forward,
// activation backward (the formulas of strata/core/math.hpp), dropout, scale / axpy / add /
// copy / fill, casts between element types, strided copies and token-id casts.
// Implementations: host/elementwise.hpp, cuda/elementwise.cuh.
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "strata/backend/dispatch.hpp"
#include "strata/core/kernel_args.hpp"

namespace strata::backend {

namespace impl {
template <class Queue>
struct elementwise_kernels;
}  // namespace impl

inline namespace kernels {

// y = act(x + bias) over a rows x cols matrix; bias (length cols) may be null. If pre_out
// is non-null it receives x + bias, rounded like y (the backward pass reads it). pre_out
// and y may each alias x.
template <class T, kernel_queue Q>
void bias_activation_forward(Q& q, activation act, std::size_t rows, std::size_t cols, const T* x, const T* bias,
                             T* pre_out, T* y) {
  static_assert(detail::is_elem_v<T>);
  if (rows * cols == 0) return;
  detail::need(x && y, "bias_activation_forward", "x and y must be non-null");
  impl::elementwise_kernels<Q>::bias_activation_forward(q, act, rows, cols, x, bias, pre_out, y);
}

// dx = dy * act'(pre), n elements (pre may be null for activation::none). dx may alias dy.
template <class T, kernel_queue Q>
void activation_backward(Q& q, activation act, std::size_t n, const T* pre, const T* dy, T* dx) {
  static_assert(detail::is_elem_v<T>);
  if (n == 0) return;
  detail::need(dy && dx && (pre || act == activation::none), "activation_backward", "null pointer");
  impl::elementwise_kernels<Q>::activation_backward(q, act, n, pre, dy, dx);
}

// Dropout over a rows × cols block, forward and backward alike: y = x · a.scale where the
// mask keeps element (r, c) — dropout_keep at the global coordinates `a` gives it
// (core/kernel_args.hpp, core/random.hpp) under the step's key *a.key — else 0 (the
// formula of math::dropout_value, in compute_t<T> with the scale rounded to it, one
// rounding to T). y may alias x.
template <class T, kernel_queue Q>
void dropout(Q& q, const dropout_args& a, std::size_t rows, std::size_t cols, const T* x, T* y) {
  static_assert(detail::is_elem_v<T>);
  if (rows * cols == 0) return;
  detail::need(x && y && a.key, "dropout", "null pointer");
  detail::need(a.sample_rows > 0, "dropout", "sample_rows must be positive");
  impl::elementwise_kernels<Q>::dropout(q, a, rows, cols, x, y);
}

// x *= alpha (bf16, f16: in float, alpha rounded to T first).
template <class T, kernel_queue Q>
void scale(Q& q, std::size_t n, double alpha, T* x) {
  static_assert(detail::is_elem_v<T>);
  if (n == 0) return;
  impl::elementwise_kernels<Q>::scale(q, n, alpha, x);
}

// y += alpha * x (bf16, f16: in float, alpha rounded to T first).
template <class T, kernel_queue Q>
void axpy(Q& q, std::size_t n, double alpha, const T* x, T* y) {
  static_assert(detail::is_elem_v<T>);
  if (n == 0) return;
  impl::elementwise_kernels<Q>::axpy(q, n, alpha, x, y);
}

// y = a + b, n elements, in compute_t<T> (one rounding for bf16, f16); y may alias a or b.
template <class T, kernel_queue Q>
void add(Q& q, std::size_t n, const T* a, const T* b, T* y) {
  static_assert(detail::is_elem_v<T>);
  if (n == 0) return;
  detail::need(a && b && y, "add", "null pointer");
  impl::elementwise_kernels<Q>::add(q, n, a, b, y);
}

// y[i] = f(x[i]...) for i < n: a per-element kernel written once, as a STRATA_HD functor
// (Kokkos' parallel_for), that every backend runs — a layer with its own elementwise math
// needs no kernel of its own. f receives each input in compute_t of its type (float for
// bf16, f16) and its result is rounded to T once; y may alias an input.
template <class T, kernel_queue Q, class F, class... X>
void map(Q& q, std::size_t n, F f, T* y, const X*... x) {
  static_assert(detail::is_elem_v<T> && (detail::is_elem_v<X> && ...));
  static_assert(std::is_trivially_copyable_v<F>, "map: the functor is copied to the device by value");
  if (n == 0) return;
  detail::need(y && (... && (x != nullptr)), "map", "null pointer");
  impl::elementwise_kernels<Q>::map(q, n, f, y, x...);
}

// y = x, n elements of any trivially copyable T; x and y must not overlap.
template <class T, kernel_queue Q>
void copy(Q& q, std::size_t n, const T* x, T* y) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (n == 0) return;
  impl::elementwise_kernels<Q>::copy(q, n, x, y);
}

// x[i] = value, n elements of any trivially copyable T.
template <class T, kernel_queue Q>
void fill(Q& q, std::size_t n, T value, T* x) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (n == 0) return;
  impl::elementwise_kernels<Q>::fill(q, n, value, x);
}

// y[i] = To(x[i]) for From, To in {float, double, bf16, f16}: to bf16 or f16 rounds to
// nearest even (from double via float: two roundings), bf16/f16 -> float/double and
// float -> double are exact, double -> float rounds to nearest; the same bits on every
// backend, except that a NaN's payload may differ. Mixed precision uses it for the
// 16-bit copies of the master parameters and to bring the batch into the compute type.
// y must not overlap x.
template <class From, class To, kernel_queue Q>
void cast_elements(Q& q, std::size_t n, const From* x, To* y) {
  static_assert(detail::is_elem_v<From> && detail::is_elem_v<To>);
  if (n == 0) return;
  detail::need(x && y, "cast_elements", "null pointer");
  impl::elementwise_kernels<Q>::cast_elements(q, n, x, y);
}

// dst[r·ld_dst + c] = src[r·ld_src + c] for r < rows, c < cols; ld_src, ld_dst >= cols.
template <class T, kernel_queue Q>
void copy_2d(Q& q, std::size_t rows, std::size_t cols, const T* src, std::size_t ld_src, T* dst,
             std::size_t ld_dst) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (rows * cols == 0) return;
  detail::need(src && dst, "copy_2d", "null pointer");
  detail::need(ld_src >= cols && ld_dst >= cols, "copy_2d", "leading dimension smaller than cols");
  impl::elementwise_kernels<Q>::copy_2d(q, rows, cols, src, ld_src, dst, ld_dst);
}

// Token ids travel through the model's input as values of T: ids[i] = values[i] truncated
// toward zero. NaN and values whose truncation does not fit int32 become INT32_MIN (never
// UB), which check_ids then reports.
template <class T, kernel_queue Q>
void cast_ids(Q& q, std::size_t n, const T* values, std::int32_t* ids) {
  static_assert(detail::is_real_v<T>);
  if (n == 0) return;
  detail::need(values && ids, "cast_ids", "null pointer");
  impl::elementwise_kernels<Q>::cast_ids(q, n, values, ids);
}

}  // namespace kernels

}  // namespace strata::backend
