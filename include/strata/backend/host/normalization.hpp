#pragma once
// strata host backend, row normalization: the host implementation of
// backend/normalization.hpp (LayerNorm forward and backward, and its pieces for rows
// spread over devices; statistics in double, two-pass; batch normalisation per channel).
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

  // ---- batch normalisation: channel sums over fixed chunks of rows, combined in order ----
  static constexpr std::size_t bn_chunk = backend::detail::batchnorm_chunk_rows;

  // Σ over rows r of f(r, acc) into `width` doubles: per-chunk partials, then in chunk order.
  template <class F>
  static std::vector<double> channel_partials(queue& q, std::size_t rows, std::size_t width, F&& f) {
    const std::size_t chunks = (rows + bn_chunk - 1) / bn_chunk;
    std::vector<double> part(chunks * width, 0.0);
    q.parallel_for(chunks, [&](std::size_t k) {
      double* acc = part.data() + k * width;
      for (std::size_t r = k * bn_chunk; r < std::min(rows, (k + 1) * bn_chunk); ++r) f(r, acc);
    });
    std::vector<double> total(width, 0.0);
    for (std::size_t k = 0; k < chunks; ++k)
      for (std::size_t j = 0; j < width; ++j) total[j] += part[k * width + j];
    return total;
  }

  // C per-channel values as double (`absent` where v is null), read once per kernel rather
  // than converted per element.
  template <class V>
  static std::vector<double> as_double(std::size_t C, const V* v, double absent = 0.0) {
    std::vector<double> d(C, absent);
    if (v)
      for (std::size_t c = 0; c < C; ++c) d[c] = double(v[c]);
    return d;
  }

  template <class T, class S>
  static void channel_moment(queue& q, std::size_t rows, std::size_t C, const T* x, const S* mean, S* sums) {
    const std::vector<double> mu = mean ? as_double(C, mean) : std::vector<double>();
    const std::vector<double> t = channel_partials(q, rows, C, [&](std::size_t r, double* acc) {
      const T* xr = x + r * C;
      if (mean) {
        for (std::size_t c = 0; c < C; ++c) {
          const double d = double(xr[c]) - mu[c];
          acc[c] += d * d;
        }
      } else {
        for (std::size_t c = 0; c < C; ++c) acc[c] += double(xr[c]);
      }
    });
    for (std::size_t c = 0; c < C; ++c) sums[c] = S(t[c]);
  }

  template <class S>
  static void batchnorm_finish(queue&, std::size_t C, double count, double eps, S* mean, S* rstd) {
    for (std::size_t c = 0; c < C; ++c) {
      if (mean) mean[c] = S(double(mean[c]) / count);
      if (rstd) rstd[c] = S(math::batchnorm::rstd_of(double(rstd[c]), count, eps));
    }
  }

  template <class T, class S>
  static void batchnorm_apply(queue& q, std::size_t rows, std::size_t C, const T* x, const S* mean, const S* rstd,
                              const T* gamma, const T* beta, T* y) {
    // the per-channel values in double once (γ 1 and β 0 where absent, as forward's callers pass)
    const std::vector<double> mu = as_double(C, mean), rs = as_double(C, rstd), ga = as_double(C, gamma, 1.0),
                              be = as_double(C, beta, 0.0);
    detail::for_rows(q, rows, C, [&](std::size_t r) {
      const T* xr = x + r * C;
      T* yr = y + r * C;
      for (std::size_t c = 0; c < C; ++c) yr[c] = T(math::batchnorm::forward(double(xr[c]), mu[c], rs[c], ga[c], be[c]));
    });
  }

  template <class T, class S, class G>
  static void batchnorm_backward_sums(queue& q, std::size_t rows, std::size_t C, const T* x, const S* mean,
                                      const S* rstd, const T* dy, S* sums, G* dgamma, G* dbeta) {
    const std::vector<double> mu = as_double(C, mean), rs = as_double(C, rstd);
    const std::vector<double> t = channel_partials(q, rows, 2 * C, [&](std::size_t r, double* acc) {
      const T* xr = x + r * C;
      const T* dyr = dy + r * C;
      for (std::size_t c = 0; c < C; ++c) {
        const double g = double(dyr[c]);
        acc[c] += g;
        acc[C + c] += g * (double(xr[c]) - mu[c]) * rs[c];
      }
    });
    for (std::size_t c = 0; c < C; ++c) {
      sums[c] = S(t[c]);
      sums[C + c] = S(t[C + c]);
      if (dbeta) dbeta[c] = G(double(dbeta[c]) + t[c]);
      if (dgamma) dgamma[c] = G(double(dgamma[c]) + t[C + c]);
    }
  }

  template <class S>
  static void batchnorm_accumulate(queue&, std::size_t C, double count, const S* mean, const S* centered, S* sums) {
    for (std::size_t c = 0; c < C; ++c) {
      sums[c] = S(double(sums[c]) + double(mean[c]));
      sums[C + c] = S(double(sums[C + c]) + double(centered[c]) / (count - 1));
    }
    sums[2 * C] = S(double(sums[2 * C]) + 1);
  }

  template <class S>
  static void batchnorm_fold(queue&, std::size_t C, double momentum, S* kept, S* sums) {
    const double n = double(sums[2 * C]);
    for (std::size_t c = 0; c < 2 * C; ++c) {
      if (n > 0) kept[c] = S(math::batchnorm::running(double(kept[c]), double(sums[c]) / n, momentum));
      sums[c] = S(0);
    }
    sums[2 * C] = S(0);
  }

  template <class T, class S>
  static void batchnorm_backward_data(queue& q, std::size_t rows, std::size_t C, double count, const T* x,
                                      const S* mean, const S* rstd, const T* gamma, const T* dy, const S* sums,
                                      T* dx) {
    // math::batchnorm::input_grad with its per-channel factors γ·rstd and Σdy/count computed
    // once (the same operations in the same order: bit for bit its value)
    const std::vector<double> mu = as_double(C, mean), rs = as_double(C, rstd);
    std::vector<double> scale = as_double(C, gamma, 1.0), mean_dy(C), sum_dy_xhat = as_double(C, sums + C);
    for (std::size_t c = 0; c < C; ++c) {
      scale[c] *= rs[c];
      mean_dy[c] = double(sums[c]) / count;
    }
    detail::for_rows(q, rows, C, [&](std::size_t r) {
      const T* xr = x + r * C;
      const T* dyr = dy + r * C;
      T* dxr = dx + r * C;
      for (std::size_t c = 0; c < C; ++c) {
        const double xhat = (double(xr[c]) - mu[c]) * rs[c];
        dxr[c] = T(scale[c] * (double(dyr[c]) - mean_dy[c] - xhat * sum_dy_xhat[c] / count));
      }
    });
  }
};

}  // namespace strata::backend::host

namespace strata::backend::impl {
template <>
struct normalization_kernels<host::queue> : host::normalization_kernels {};
}  // namespace strata::backend::impl
