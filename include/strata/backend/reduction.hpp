#pragma once
// The reduction kernel family's front (dispatch.hpp): whole-tensor sums and sums of
// squares, the NaN/Inf scan, and column sums (bias gradients). Every reduction
// accumulates in double and is deterministic (the same bits from run to run; the host's
// also for every thread count). Implementations: host/reduction.hpp, cuda/reduction.cuh.
#include <cstddef>

#include "strata/backend/dispatch.hpp"

namespace strata::backend {

namespace impl {
template <class Queue>
struct reduction_kernels;
}  // namespace impl

inline namespace kernels {

// Sum of x[0..n) in double. A device backend returns it through a host sync: it
// SYNCHRONIZES q (not inside graph capture).
template <class T, kernel_queue Q>
double sum(Q& q, std::size_t n, const T* x) {
  static_assert(detail::is_elem_v<T>);
  if (n == 0) return 0.0;
  detail::need(x != nullptr, "sum", "null pointer");
  return impl::reduction_kernels<Q>::sum(q, n, x);
}

// Sum of squares of x[0..n) in double (gradient norms). SYNCHRONIZES q, as sum.
template <class T, kernel_queue Q>
double sum_squares(Q& q, std::size_t n, const T* x) {
  static_assert(detail::is_elem_v<T>);
  if (n == 0) return 0.0;
  detail::need(x != nullptr, "sum_squares", "null pointer");
  return impl::reduction_kernels<Q>::sum_squares(q, n, x);
}

// True iff no element of x[0..n) is NaN or ±Inf (an exponent-bit test: branch-free and
// immune to -ffast-math folding isfinite away). SYNCHRONIZES q, as sum.
template <class T, kernel_queue Q>
bool all_finite(Q& q, std::size_t n, const T* x) {
  static_assert(detail::is_elem_v<T>);
  if (n == 0) return true;
  detail::need(x != nullptr, "all_finite", "null pointer");
  return impl::reduction_kernels<Q>::all_finite(q, n, x);
}

// dbias[c] (=|+=, by accumulate) Σ over rows of dy[r, c], in double. T: the activation
// gradient (float, double, bf16, f16); G: the bias gradient (float or double; bf16 dy
// into a float master gradient).
template <class T, class G = T, kernel_queue Q>
void bias_grad(Q& q, std::size_t rows, std::size_t cols, const T* dy, G* dbias, bool accumulate) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<G>);
  if (cols == 0) return;
  detail::need(dbias && (dy || rows == 0), "bias_grad", "null pointer");
  impl::reduction_kernels<Q>::bias_grad(q, rows, cols, dy, dbias, accumulate);
}

}  // namespace kernels

}  // namespace strata::backend
