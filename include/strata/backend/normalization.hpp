#pragma once
// The normalization kernel family's front (dispatch.hpp): LayerNorm over the last
// dimension D, forward and backward, and its pieces for rows whose features are spread
// over devices. Row statistics and column sums in double, deterministic. (Batch
// normalisation, per channel, is its own family: batchnorm.hpp.)
// Implementations: host/normalization.hpp, cuda/normalization.cuh.
#include <cstddef>

#include "strata/backend/dispatch.hpp"

namespace strata::backend {

namespace impl {
template <class Queue>
struct normalization_kernels;
}  // namespace impl

inline namespace kernels {

// y = (x - mean) * rstd * gamma + beta per row, rstd = 1/sqrt(var + eps), biased variance
// (PyTorch); statistics and the normalization in double (two-pass). gamma/beta may be null
// (no affine); mean_out/rstd_out (length rows) may be null if no backward pass follows.
// y may alias x. T: x, gamma, beta, y; S: mean_out, rstd_out.
template <class T, class S = T, kernel_queue Q>
void layernorm_forward(Q& q, std::size_t rows, std::size_t D, const T* x, const T* gamma, const T* beta, double eps,
                       T* y, S* mean_out, S* rstd_out) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  if (rows == 0) return;
  detail::need(D > 0, "layernorm_forward", "D must be positive");
  detail::need(x && y, "layernorm_forward", "null pointer");
  impl::normalization_kernels<Q>::layernorm_forward(q, rows, D, x, gamma, beta, eps, y, mean_out, rstd_out);
}

// Given the forward's mean/rstd (as stored, i.e. rounded to S):
//   xhat = (x - mean) * rstd,  g = dy * gamma
//   dx = rstd * (g - mean_j(g) - xhat * mean_j(g * xhat))        (overwritten)
//   dgamma (=|+=) sum_rows dy * xhat,  dbeta (=|+=) sum_rows dy   (accumulate)
// gamma null means 1. dx, dgamma, dbeta may each be null to skip them. Elementwise terms
// in compute_t<T>, row and column sums in double. G: dgamma, dbeta.
template <class T, class S = T, class G = S, kernel_queue Q>
void layernorm_backward(Q& q, std::size_t rows, std::size_t D, const T* x, const T* gamma, const S* mean,
                        const S* rstd, const T* dy, T* dx, G* dgamma, G* dbeta, bool accumulate) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S> && detail::is_real_v<G>);
  if (D == 0) return;
  detail::need(rows == 0 || (x && mean && rstd && dy), "layernorm_backward", "null pointer");
  impl::normalization_kernels<Q>::layernorm_backward(q, rows, D, x, gamma, mean, rstd, dy, dx, dgamma, dbeta,
                                                     accumulate);
}

// ---------------------------------------------------------------------------
// LayerNorm with each row's features spread over devices (2D/2.5D/3D tensor
// parallelism): this device holds D of every row's `total` features. Between
// the partial and the final step the caller sums the 2·rows statistics over
// the devices that hold the other features of the same rows. One formula per
// step, strata/core/math.hpp's.
// ---------------------------------------------------------------------------

// Σx and Σx² of the local features: sums[r] and sums[rows + r].
template <class T, class S, kernel_queue Q>
void layernorm_partial_moments(Q& q, std::size_t rows, std::size_t D, const T* x, S* sums) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  if (rows == 0) return;
  detail::need(x && sums, "layernorm_partial_moments", "null pointer");
  impl::normalization_kernels<Q>::layernorm_partial_moments(q, rows, D, x, sums);
}

// From the summed moments: stats becomes [mean | 1/σ] (as layernorm_forward's mean_out,
// rstd_out), and y = (x − mean)·(1/σ)·γ + β over the local features (γ, β: their slices).
template <class T, class S, kernel_queue Q>
void layernorm_forward_moments(Q& q, std::size_t rows, std::size_t D, std::size_t total, double eps, const T* x,
                               const T* gamma, const T* beta, S* stats, T* y) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  if (rows == 0) return;
  detail::need(x && y && stats && total > 0, "layernorm_forward_moments", "null pointer or no features");
  impl::normalization_kernels<Q>::layernorm_forward_moments(q, rows, D, total, eps, x, gamma, beta, stats, y);
}

// Σg and Σg·x̂ (g = dy·γ, x̂ = (x − mean)/σ) of the local features: sums[r], sums[rows + r].
template <class T, class S, kernel_queue Q>
void layernorm_backward_partial(Q& q, std::size_t rows, std::size_t D, const T* x, const T* gamma, const S* mean,
                                const S* rstd, const T* dy, S* sums) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  if (rows == 0) return;
  detail::need(x && mean && rstd && dy && sums, "layernorm_backward_partial", "null pointer");
  impl::normalization_kernels<Q>::layernorm_backward_partial(q, rows, D, x, gamma, mean, rstd, dy, sums);
}

// dx (overwritten) from Σg and Σg·x̂ summed over all `total` features.
template <class T, class S, kernel_queue Q>
void layernorm_backward_moments(Q& q, std::size_t rows, std::size_t D, std::size_t total, const T* x,
                                const T* gamma, const S* mean, const S* rstd, const T* dy, const S* sums, T* dx) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  if (rows == 0) return;
  detail::need(x && mean && rstd && dy && sums && dx && total > 0, "layernorm_backward_moments", "null pointer");
  impl::normalization_kernels<Q>::layernorm_backward_moments(q, rows, D, total, x, gamma, mean, rstd, dy, sums, dx);
}

}  // namespace kernels

}  // namespace strata::backend
