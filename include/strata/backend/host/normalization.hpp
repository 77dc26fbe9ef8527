#pragma once
// strata host backend, row normalization: the host implementation of
// backend/normalization.hpp (LayerNorm forward and backward, and its pieces for rows
// spread over devices; statistics in double, two-pass).
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
#include "strata/backend/normalization.hpp"
#include "strata/core/math.hpp"

namespace strata::backend::host {

namespace detail {
// Float rows with γ (and β): the statistics still in double, summed in `ln_lanes` partial
// sums combined in a fixed order, so that the loops vectorize (one running double sum is
// a dependency chain: 2.5x slower at D = 64, the layer the host model prices at its bytes).
inline constexpr std::size_t ln_lanes = 8;
STRATA_HOST_CLONES inline void layernorm_forward_row_f32(std::size_t D, const float* x, const float* gamma,
                                                         const float* beta, double eps, float* y, double& mean,
                                                         double& rstd) {
  constexpr std::size_t L = ln_lanes;
  double a[L] = {}, c[L] = {};
  std::size_t j = 0;
  for (; j + L <= D; j += L)
    for (std::size_t l = 0; l < L; ++l) a[l] += double(x[j + l]);
  double s = 0;
  for (std::size_t l = 0; l < L; ++l) s += a[l];
  for (; j < D; ++j) s += double(x[j]);
  mean = s / double(D);
  for (j = 0; j + L <= D; j += L)
    for (std::size_t l = 0; l < L; ++l) {
      const double d = double(x[j + l]) - mean;
      c[l] += d * d;
    }
  double v = 0;
  for (std::size_t l = 0; l < L; ++l) v += c[l];
  for (; j < D; ++j) v += (double(x[j]) - mean) * (double(x[j]) - mean);
  rstd = 1.0 / std::sqrt(v / double(D) + eps);
  const double m = mean, r = rstd;
  if (beta)
    for (j = 0; j < D; ++j) y[j] = float((double(x[j]) - m) * r * double(gamma[j]) + double(beta[j]));
  else
    for (j = 0; j < D; ++j) y[j] = float((double(x[j]) - m) * r * double(gamma[j]));
}
STRATA_HOST_CLONES inline void layernorm_backward_row_f32(std::size_t D, const float* x, const float* gamma, double mu,
                                                          double rs, const float* dy, float* dx) {
  constexpr std::size_t L = ln_lanes;
  double a[L] = {}, c[L] = {};
  std::size_t j = 0;
  for (; j + L <= D; j += L)
    for (std::size_t l = 0; l < L; ++l) {
      const double g = double(dy[j + l]) * double(gamma[j + l]);
      a[l] += g;
      c[l] += g * (double(x[j + l]) - mu) * rs;
    }
  double sg = 0, sgx = 0;
  for (std::size_t l = 0; l < L; ++l) sg += a[l], sgx += c[l];
  for (; j < D; ++j) {
    const double g = double(dy[j]) * double(gamma[j]);
    sg += g;
    sgx += g * (double(x[j]) - mu) * rs;
  }
  sg /= double(D);
  sgx /= double(D);
  for (j = 0; j < D; ++j) {
    const double g = double(dy[j]) * double(gamma[j]);
    dx[j] = float(rs * (g - sg - (double(x[j]) - mu) * rs * sgx));
  }
}
}  // namespace detail

// Static members on arguments the front has checked (impl::normalization_kernels<queue>).
struct normalization_kernels {
  template <class T, class S>
  static void layernorm_forward(queue& q, std::size_t rows, std::size_t D, const T* x, const T* gamma, const T* beta,
                                double eps, T* y, S* mean_out, S* rstd_out) {
    if constexpr (std::is_same_v<T, float>)
      if (gamma) {
        detail::for_rows(q, rows, D, [&](std::size_t r) {
          double mean = 0, rstd = 0;
          detail::layernorm_forward_row_f32(D, x + r * D, gamma, beta, eps, y + r * D, mean, rstd);
          if (mean_out) mean_out[r] = S(mean);
          if (rstd_out) rstd_out[r] = S(rstd);
        });
        return;
      }
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

  // dx by rows; dgamma/dbeta by column blocks, each task walking all rows in order.
  template <class T, class S, class G>
  static void layernorm_backward(queue& q, std::size_t rows, std::size_t D, const T* x, const T* gamma, const S* mean,
                                 const S* rstd, const T* dy, T* dx, G* dgamma, G* dbeta, bool accumulate) {
    bool dx_done = false;
    if constexpr (std::is_same_v<T, float>)
      if (dx && rows > 0 && gamma) {
        detail::for_rows(q, rows, D, [&](std::size_t r) {
          detail::layernorm_backward_row_f32(D, x + r * D, gamma, double(mean[r]), double(rstd[r]), dy + r * D,
                                             dx + r * D);
        });
        dx_done = true;
      }
    if (dx && rows > 0 && !dx_done) {
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

  template <class T, class S>
  static void layernorm_partial_moments(queue& q, std::size_t rows, std::size_t D, const T* x, S* sums) {
    detail::for_rows(q, rows, D, [&](std::size_t r) {
      double s = 0, ss = 0;
      math::layernorm_row_moments<detail::compute_t<T>>(x + r * D, D, s, ss);
      sums[r] = S(s);
      sums[rows + r] = S(ss);
    });
  }

  template <class T, class S>
  static void layernorm_forward_moments(queue& q, std::size_t rows, std::size_t D, std::size_t total, double eps,
                                        const T* x, const T* gamma, const T* beta, S* stats, T* y) {
    detail::for_rows(q, rows, D, [&](std::size_t r) {
      double mean = 0, rstd = 0;
      math::layernorm_moments_to_stats(double(stats[r]), double(stats[rows + r]), double(total), eps, mean, rstd);
      stats[r] = S(mean);
      stats[rows + r] = S(rstd);
      math::layernorm_row_normalize<detail::compute_t<T>>(x + r * D, gamma, beta, D, double(stats[r]),
                                                          double(stats[rows + r]), y + r * D);
    });
  }

  template <class T, class S>
  static void layernorm_backward_partial(queue& q, std::size_t rows, std::size_t D, const T* x, const T* gamma,
                                         const S* mean, const S* rstd, const T* dy, S* sums) {
    detail::for_rows(q, rows, D, [&](std::size_t r) {
      double sg = 0, sgx = 0;
      math::layernorm_row_grad_sums<detail::compute_t<T>>(x + r * D, gamma, dy + r * D, D, double(mean[r]),
                                                          double(rstd[r]), sg, sgx);
      sums[r] = S(sg);
      sums[rows + r] = S(sgx);
    });
  }

  template <class T, class S>
  static void layernorm_backward_moments(queue& q, std::size_t rows, std::size_t D, std::size_t total, const T* x,
                                         const T* gamma, const S* mean, const S* rstd, const T* dy, const S* sums,
                                         T* dx) {
    detail::for_rows(q, rows, D, [&](std::size_t r) {
      math::layernorm_row_dx<detail::compute_t<T>>(x + r * D, gamma, dy + r * D, D, double(mean[r]), double(rstd[r]),
                                                   double(sums[r]) / double(total),
                                                   double(sums[rows + r]) / double(total), dx + r * D);
    });
  }
};

}  // namespace strata::backend::host

namespace strata::backend::impl {
template <>
struct normalization_kernels<host::queue> : host::normalization_kernels {};
}  // namespace strata::backend::impl
