#pragma once
// strata host backend, row normalization: LayerNorm forward and backward.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/backend/host/launch.hpp"
#include "strata/core/math.hpp"

namespace strata::backend::host {

// ---------------------------------------------------------------------------
// LayerNorm over the last dimension D
// ---------------------------------------------------------------------------

// y = (x - mean) * rstd * gamma + beta per row, rstd = 1/sqrt(var + eps),
// biased variance (PyTorch). Statistics in double (two-pass); gamma/beta may
// be null (no affine); mean_out/rstd_out (length rows) may be null if no
// backward pass follows. y may alias x.
template <class T, class S = T>
void layernorm_forward(queue& q, std::size_t rows, std::size_t D, const T* x, const T* gamma, const T* beta, double eps,
                       T* y, S* mean_out, S* rstd_out) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  if (rows == 0) return;
  detail::need(D > 0, "layernorm_forward", "D must be positive");
  detail::need(x && y, "layernorm_forward", "null pointer");
  detail::for_rows(q, rows, D, [&](std::size_t r) {
    const T* xr = x + r * D;
    T* yr = y + r * D;
    double mean = 0;
    for (std::size_t j = 0; j < D; ++j) mean += double(xr[j]);
    mean /= double(D);
    double var = 0;
    for (std::size_t j = 0; j < D; ++j) {
      const double c = double(xr[j]) - mean;
      var += c * c;
    }
    var /= double(D);
    const double rstd = 1.0 / std::sqrt(var + eps);
    if (mean_out) mean_out[r] = S(mean);
    if (rstd_out) rstd_out[r] = S(rstd);
    for (std::size_t j = 0; j < D; ++j) {
      double v = (double(xr[j]) - mean) * rstd;
      if (gamma) v *= double(gamma[j]);
      if (beta) v += double(beta[j]);
      yr[j] = T(v);
    }
  });
}

// Given the forward's mean/rstd (as stored, i.e. rounded to S):
//   xhat = (x - mean) * rstd,  g = dy * gamma
//   dx = rstd * (g - mean_j(g) - xhat * mean_j(g * xhat))        (overwritten)
//   dgamma (=|+=) sum_rows dy * xhat,  dbeta (=|+=) sum_rows dy   (accumulate)
// gamma null means 1. dx, dgamma, dbeta may each be null to skip them.
template <class T, class S = T, class G = S>
void layernorm_backward(queue& q, std::size_t rows, std::size_t D, const T* x, const T* gamma, const S* mean,
                        const S* rstd, const T* dy, T* dx, G* dgamma, G* dbeta, bool accumulate) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S> && detail::is_real_v<G>);
  if (D == 0) return;
  detail::need(rows == 0 || (x && mean && rstd && dy), "layernorm_backward", "null pointer");
  if (dx && rows > 0) {
    detail::for_rows(q, rows, D, [&](std::size_t r) {
      const T* xr = x + r * D;
      const T* dyr = dy + r * D;
      const double mu = double(mean[r]), rs = double(rstd[r]);
      double sg = 0, sgx = 0;
      for (std::size_t j = 0; j < D; ++j) {
        const double g = double(dyr[j]) * (gamma ? double(gamma[j]) : 1.0);
        sg += g;
        sgx += g * (double(xr[j]) - mu) * rs;
      }
      sg /= double(D);
      sgx /= double(D);
      T* dxr = dx + r * D;
      for (std::size_t j = 0; j < D; ++j) {
        const double g = double(dyr[j]) * (gamma ? double(gamma[j]) : 1.0);
        const double xh = (double(xr[j]) - mu) * rs;
        dxr[j] = T(rs * (g - sg - xh * sgx));
      }
    });
  }
  if (!dgamma && !dbeta) return;
  const std::size_t blocks = (D + detail::col_block - 1) / detail::col_block;
  q.parallel_for(blocks, [&](std::size_t blk) {
    const std::size_t c0 = blk * detail::col_block, nc = std::min(detail::col_block, D - c0);
    double ag[detail::col_block], ab[detail::col_block];
    for (std::size_t j = 0; j < nc; ++j) {
      ag[j] = (accumulate && dgamma) ? double(dgamma[c0 + j]) : 0.0;
      ab[j] = (accumulate && dbeta) ? double(dbeta[c0 + j]) : 0.0;
    }
    for (std::size_t r = 0; r < rows; ++r) {
      const T* xr = x + r * D + c0;
      const T* dyr = dy + r * D + c0;
      const double mu = double(mean[r]), rs = double(rstd[r]);
      for (std::size_t j = 0; j < nc; ++j) {
        ag[j] += double(dyr[j]) * ((double(xr[j]) - mu) * rs);
        ab[j] += double(dyr[j]);
      }
    }
    for (std::size_t j = 0; j < nc; ++j) {
      if (dgamma) dgamma[c0 + j] = G(ag[j]);
      if (dbeta) dbeta[c0 + j] = G(ab[j]);
    }
  });
}

// ---------------------------------------------------------------------------
// LayerNorm with each row's features spread over devices (2D/2.5D/3D tensor
// parallelism): this device holds D of every row's `total` features. Between
// the partial and the final step the caller sums the 2·rows statistics over
// the devices that hold the other features of the same rows.
// ---------------------------------------------------------------------------

// Σx and Σx² of the local features: sums[r] and sums[rows + r].
template <class T, class S>
void layernorm_partial_moments(queue& q, std::size_t rows, std::size_t D, const T* x, S* sums) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  if (rows == 0) return;
  detail::need(x && sums, "layernorm_partial_moments", "null pointer");
  detail::for_rows(q, rows, D, [&](std::size_t r) {
    double s = 0, ss = 0;
    math::layernorm_row_moments<detail::compute_t<T>>(x + r * D, D, s, ss);
    sums[r] = S(s);
    sums[rows + r] = S(ss);
  });
}

// From the summed moments: stats becomes [mean | 1/σ] (as layernorm_forward's mean_out,
// rstd_out), and y = (x − mean)·(1/σ)·γ + β over the local features (γ, β: their slices).
template <class T, class S>
void layernorm_forward_moments(queue& q, std::size_t rows, std::size_t D, std::size_t total, double eps, const T* x,
                               const T* gamma, const T* beta, S* stats, T* y) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  if (rows == 0) return;
  detail::need(x && y && stats && total > 0, "layernorm_forward_moments", "null pointer or no features");
  detail::for_rows(q, rows, D, [&](std::size_t r) {
    double mean = 0, rstd = 0;
    math::layernorm_moments_to_stats(double(stats[r]), double(stats[rows + r]), double(total), eps, mean, rstd);
    stats[r] = S(mean);
    stats[rows + r] = S(rstd);
    math::layernorm_row_normalize<detail::compute_t<T>>(x + r * D, gamma, beta, D, double(stats[r]),
                                                        double(stats[rows + r]), y + r * D);
  });
}

// Σg and Σg·x̂ (g = dy·γ, x̂ = (x − mean)/σ) of the local features: sums[r], sums[rows + r].
template <class T, class S>
void layernorm_backward_partial(queue& q, std::size_t rows, std::size_t D, const T* x, const T* gamma, const S* mean,
                                const S* rstd, const T* dy, S* sums) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  if (rows == 0) return;
  detail::need(x && mean && rstd && dy && sums, "layernorm_backward_partial", "null pointer");
  detail::for_rows(q, rows, D, [&](std::size_t r) {
    double sg = 0, sgx = 0;
    math::layernorm_row_grad_sums<detail::compute_t<T>>(x + r * D, gamma, dy + r * D, D, double(mean[r]),
                                                        double(rstd[r]), sg, sgx);
    sums[r] = S(sg);
    sums[rows + r] = S(sgx);
  });
}

// dx (overwritten) from Σg and Σg·x̂ summed over all `total` features.
template <class T, class S>
void layernorm_backward_moments(queue& q, std::size_t rows, std::size_t D, std::size_t total, const T* x,
                                const T* gamma, const S* mean, const S* rstd, const T* dy, const S* sums, T* dx) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  if (rows == 0) return;
  detail::need(x && mean && rstd && dy && sums && dx && total > 0, "layernorm_backward_moments", "null pointer");
  detail::for_rows(q, rows, D, [&](std::size_t r) {
    math::layernorm_row_dx<detail::compute_t<T>>(x + r * D, gamma, dy + r * D, D, double(mean[r]), double(rstd[r]),
                                                 double(sums[r]) / double(total),
                                                 double(sums[rows + r]) / double(total), dx + r * D);
  });
}

}  // namespace strata::backend::host
