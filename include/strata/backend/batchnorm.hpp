#pragma once
// The batch-normalisation kernel family's front (dispatch.hpp): BatchNorm2d per channel over
// the rows of x [rows, C] (channels last: every pixel of every sample is a row). The
// statistics of a micro-batch spread over devices are these sums added over the devices
// (the caller's all-reduce) before the finishing step; running statistics are kept across
// steps. Sums in double over fixed chunks of rows combined in order, deterministic; the
// per-element formulas are core/math.hpp's (math::batchnorm).
// Implementations: host/batchnorm.hpp, cuda/batchnorm.cuh.
#include <cstddef>

#include "strata/backend/dispatch.hpp"

namespace strata::backend {

namespace impl {
template <class Queue>
struct batchnorm_kernels;
}  // namespace impl

namespace detail {
// Rows per partial sum of the channel sums, every backend's: the sums of fixed chunks are
// combined in chunk order, so the chunk is part of the result's definition.
inline constexpr std::size_t batchnorm_chunk_rows = 256;
}  // namespace detail

inline namespace kernels {

// sums[c] = Σ_r x[r, c] (mean null) or Σ_r (x[r, c] − mean[c])² (overwritten).
template <class T, class S, kernel_queue Q>
void channel_moment(Q& q, std::size_t rows, std::size_t C, const T* x, const S* mean, S* sums) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  if (C == 0) return;
  detail::need(sums && (x || rows == 0), "channel_moment", "null pointer");
  impl::batchnorm_kernels<Q>::channel_moment(q, rows, C, x, mean, sums);
}

// In place over C channels of `count` values each: mean[c] = Σx / count, and
// rstd[c] = 1/√(Σ(x − mean)² / count + eps) (biased variance, PyTorch's training mode).
// Either pointer may be null.
template <class S, kernel_queue Q>
void batchnorm_finish(Q& q, std::size_t C, double count, double eps, S* mean, S* rstd) {
  static_assert(detail::is_real_v<S>);
  if (C == 0) return;
  detail::need(count > 0, "batchnorm_finish", "no values to normalise over");
  impl::batchnorm_kernels<Q>::batchnorm_finish(q, C, count, eps, mean, rstd);
}

// y = γ·(x − mean)·rstd + β per channel (γ, β null: 1, 0). y may alias x.
template <class T, class S, kernel_queue Q>
void batchnorm_apply(Q& q, std::size_t rows, std::size_t C, const T* x, const S* mean, const S* rstd, const T* gamma,
                     const T* beta, T* y) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  if (rows == 0 || C == 0) return;
  detail::need(x && mean && rstd && y, "batchnorm_apply", "null pointer");
  impl::batchnorm_kernels<Q>::batchnorm_apply(q, rows, C, x, mean, rstd, gamma, beta, y);
}

// sums[c] = Σ_r dy, sums[C + c] = Σ_r dy·x̂ over the local rows (overwritten), and the same
// sums added to dbeta[c] and dgamma[c] (each may be null). G: dgamma, dbeta.
template <class T, class S, class G, kernel_queue Q>
void batchnorm_backward_sums(Q& q, std::size_t rows, std::size_t C, const T* x, const S* mean, const S* rstd,
                             const T* dy, S* sums, G* dgamma, G* dbeta) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S> && detail::is_real_v<G>);
  if (C == 0) return;
  detail::need(sums && mean && rstd && (rows == 0 || (x && dy)), "batchnorm_backward_sums", "null pointer");
  impl::batchnorm_kernels<Q>::batchnorm_backward_sums(q, rows, C, x, mean, rstd, dy, sums, dgamma, dbeta);
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
  impl::batchnorm_kernels<Q>::batchnorm_backward_data(q, rows, C, count, x, mean, rstd, gamma, dy, sums, dx);
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
  impl::batchnorm_kernels<Q>::batchnorm_accumulate(q, C, count, mean, centered, sums);
}

// kept [2C] (running mean | running variance) = (1 − momentum)·kept + momentum·(the sums'
// mean over their sums[2C] micro-batches); the sums are zeroed. No micro-batch: unchanged.
template <class S, kernel_queue Q>
void batchnorm_fold(Q& q, std::size_t C, double momentum, S* kept, S* sums) {
  static_assert(detail::is_real_v<S>);
  if (C == 0) return;
  detail::need(kept && sums, "batchnorm_fold", "null pointer");
  impl::batchnorm_kernels<Q>::batchnorm_fold(q, C, momentum, kept, sums);
}

}  // namespace kernels

}  // namespace strata::backend
