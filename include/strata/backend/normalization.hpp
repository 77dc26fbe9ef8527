#pragma once
// The normalization kernel family's front (dispatch.hpp): LayerNorm over the last
// dimension D, forward and backward, and its pieces for rows whose features are spread
// over devices; batch normalisation per channel (BatchNorm2d). Row statistics and column
// sums in double, deterministic.
// Implementations: host/normalization.hpp, cuda/normalization.cuh.
#include <cstddef>

#include "strata/backend/dispatch.hpp"

namespace strata::backend {

namespace impl {
template <class Queue>
struct normalization_kernels;
}  // namespace impl

namespace detail {
// Rows per partial sum of the channel sums, every backend's: the sums of fixed chunks are
// combined in chunk order, so the chunk is part of the result's definition.
inline constexpr std::size_t batchnorm_chunk_rows = 256;
}  // namespace detail

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

// ---------------------------------------------------------------------------
// Batch normalisation (BatchNorm2d): per channel over the rows of x [rows, C] (channels
// last: every pixel of every sample is a row). The statistics of a micro-batch spread over
// devices are these sums added over the devices (the caller's all-reduce) before the
// finishing step. Sums in double over fixed chunks of rows combined in order.
// ---------------------------------------------------------------------------

// sums[c] = Σ_r x[r, c] (mean null) or Σ_r (x[r, c] − mean[c])² (overwritten).
template <class T, class S, kernel_queue Q>
void channel_moment(Q& q, std::size_t rows, std::size_t C, const T* x, const S* mean, S* sums) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  if (C == 0) return;
  detail::need(sums && (x || rows == 0), "channel_moment", "null pointer");
  impl::normalization_kernels<Q>::channel_moment(q, rows, C, x, mean, sums);
}

// In place over C channels of `count` values each: mean[c] = Σx / count, and
// rstd[c] = 1/√(Σ(x − mean)² / count + eps) (biased variance, PyTorch's training mode).
// Either pointer may be null.
template <class S, kernel_queue Q>
void batchnorm_finish(Q& q, std::size_t C, double count, double eps, S* mean, S* rstd) {
  static_assert(detail::is_real_v<S>);
  if (C == 0) return;
  detail::need(count > 0, "batchnorm_finish", "no values to normalise over");
  impl::normalization_kernels<Q>::batchnorm_finish(q, C, count, eps, mean, rstd);
}

// y = γ·(x − mean)·rstd + β per channel (γ, β null: 1, 0). y may alias x.
template <class T, class S, kernel_queue Q>
void batchnorm_apply(Q& q, std::size_t rows, std::size_t C, const T* x, const S* mean, const S* rstd, const T* gamma,
                     const T* beta, T* y) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  if (rows == 0 || C == 0) return;
  detail::need(x && mean && rstd && y, "batchnorm_apply", "null pointer");
  impl::normalization_kernels<Q>::batchnorm_apply(q, rows, C, x, mean, rstd, gamma, beta, y);
}

// sums[c] = Σ_r dy, sums[C + c] = Σ_r dy·x̂ over the local rows (overwritten), and the same
// sums added to dbeta[c] and dgamma[c] (each may be null). G: dgamma, dbeta.
template <class T, class S, class G, kernel_queue Q>
void batchnorm_backward_sums(Q& q, std::size_t rows, std::size_t C, const T* x, const S* mean, const S* rstd,
                             const T* dy, S* sums, G* dgamma, G* dbeta) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S> && detail::is_real_v<G>);
  if (C == 0) return;
  detail::need(sums && mean && rstd && (rows == 0 || (x && dy)), "batchnorm_backward_sums", "null pointer");
  impl::normalization_kernels<Q>::batchnorm_backward_sums(q, rows, C, x, mean, rstd, dy, sums, dgamma, dbeta);
}

// dx (overwritten) = γ·rstd·(dy − sums[c]/count − x̂·sums[C + c]/count), the sums over all
// `count` values of the channel (γ null: 1).
template <class T, class S, kernel_queue Q>
void batchnorm_backward_data(Q& q, std::size_t rows, std::size_t C, double count, const T* x, const S* mean,
                             const S* rstd, const T* gamma, const T* dy, const S* sums, T* dx) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  if (rows == 0 || C == 0) return;
  detail::need(count > 0, "batchnorm_backward_data", "no values to normalise over");
  detail::need(x && mean && rstd && dy && sums && dx, "batchnorm_backward_data", "null pointer");
  impl::normalization_kernels<Q>::batchnorm_backward_data(q, rows, C, count, x, mean, rstd, gamma, dy, sums, dx);
}

// Running statistics (BatchNorm2d's, kept across steps). sums [2C + 1] collects a step's
// micro-batches: sums[c] += mean[c], sums[C + c] += centered[c] / (count − 1) (the unbiased
// variance of a micro-batch of `count` values per channel, from its Σ(x − mean)²), and
// sums[2C] += 1.
template <class S, kernel_queue Q>
void batchnorm_accumulate(Q& q, std::size_t C, double count, const S* mean, const S* centered, S* sums) {
  static_assert(detail::is_real_v<S>);
  if (C == 0) return;
  detail::need(count > 1, "batchnorm_accumulate", "an unbiased variance needs at least two values per channel");
  detail::need(mean && centered && sums, "batchnorm_accumulate", "null pointer");
  impl::normalization_kernels<Q>::batchnorm_accumulate(q, C, count, mean, centered, sums);
}

// kept [2C] (running mean | running variance) = (1 − momentum)·kept + momentum·(the sums'
// mean over their sums[2C] micro-batches); the sums are zeroed. No micro-batch: unchanged.
template <class S, kernel_queue Q>
void batchnorm_fold(Q& q, std::size_t C, double momentum, S* kept, S* sums) {
  static_assert(detail::is_real_v<S>);
  if (C == 0) return;
  detail::need(kept && sums, "batchnorm_fold", "null pointer");
  impl::normalization_kernels<Q>::batchnorm_fold(q, C, momentum, kept, sums);
}

}  // namespace kernels

}  // namespace strata::backend
