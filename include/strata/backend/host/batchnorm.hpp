#pragma once
// strata host backend, batch normalisation: the host implementation of
// backend/batchnorm.hpp (channel sums over fixed chunks of rows in double, combined in
// order; the per-element formulas of core/math.hpp).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/backend/batchnorm.hpp"
#include "strata/backend/host/launch.hpp"
#include "strata/core/math.hpp"

namespace strata::backend::host {

struct batchnorm_kernels {
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
struct batchnorm_kernels<host::queue> : host::batchnorm_kernels {};
}  // namespace strata::backend::impl
