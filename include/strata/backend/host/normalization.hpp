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

// Static members on arguments the front has checked (impl::normalization_kernels<queue>).
struct normalization_kernels {
  template <class T, class S>
  static void layernorm_forward(queue& q, std::size_t rows, std::size_t D, const T* x, const T* gamma, const T* beta,
                                double eps, T* y, S* mean_out, S* rstd_out) {
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
