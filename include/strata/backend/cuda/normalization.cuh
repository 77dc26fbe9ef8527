// strata-header: cuda-only
#pragma once
// strata CUDA backend, row normalization: the CUDA implementation of
// backend/normalization.hpp (LayerNorm: one thread group per row, shapes from
// launch.cuh; dgamma/dbeta from per-chunk partials combined in order).
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "strata/backend/cuda/reduction.cuh"
#include "strata/backend/normalization.hpp"

namespace strata::backend::cuda {

// ---------------------------------------------------------------------------
// LayerNorm
// ---------------------------------------------------------------------------

namespace detail {

// T: x, gamma, beta, y (cached and read in C = compute_t<T>); S: mean, rstd.
// Statistics and the normalized output in double, y rounded to T.
template <class T, class S, int TH, int IT, int RPB>
__global__ void __launch_bounds__(TH* RPB)
    k_layernorm_forward(std::size_t rows, std::size_t D, const T* x, const T* gamma, const T* beta, double eps, T* y,
                        S* mean_out, S* rstd_out) {
  using C = compute_t<T>;
  __shared__ double sd[RPB][TH / 32];
  const int g = int(threadIdx.x) / TH, t = int(threadIdx.x) % TH;
  const std::size_t r = std::size_t(blockIdx.x) * RPB + g;
  const bool active = r < rows;
  const T* xr = x + (active ? r : 0) * D;
  constexpr int NC = IT > 0 ? IT : 1;
  C v[NC];
  double s = 0;
  if constexpr (IT > 0) {
#pragma unroll
    for (int k = 0; k < IT; ++k) {
      const std::size_t j = std::size_t(t) + std::size_t(k) * TH;
      v[k] = (active && j < D) ? C(xr[j]) : C(0);
      s += double(v[k]);
    }
  } else if (active) {
    for (std::size_t j = t; j < D; j += TH) s += double(xr[j]);
  }
  const double mean = group<TH>::sum(s, sd[g]) / double(D);
  // Two-pass variance (as the host): no cancellation for large means.
  double ss = 0;
  if constexpr (IT > 0) {
#pragma unroll
    for (int k = 0; k < IT; ++k)
      if (active && std::size_t(t) + std::size_t(k) * TH < D) {
        const double c = double(v[k]) - mean;
        ss += c * c;
      }
  } else if (active) {
    for (std::size_t j = t; j < D; j += TH) {
      const double c = double(xr[j]) - mean;
      ss += c * c;
    }
  }
  const double var = group<TH>::sum(ss, sd[g]) / double(D);
  if (!active) return;
  const double rstd = 1.0 / sqrt(var + eps);
  if (t == 0) {
    if (mean_out) mean_out[r] = S(mean);
    if (rstd_out) rstd_out[r] = S(rstd);
  }
  T* yr = y + r * D;
  const auto out = [&](std::size_t j, C xv) {
    double o = (double(xv) - mean) * rstd;
    if (gamma) o *= double(gamma[j]);
    if (beta) o += double(beta[j]);
    yr[j] = T(o);
  };
  if constexpr (IT > 0) {
#pragma unroll
    for (int k = 0; k < IT; ++k) {
      const std::size_t j = std::size_t(t) + std::size_t(k) * TH;
      if (j < D) out(j, v[k]);
    }
  } else {
    for (std::size_t j = t; j < D; j += TH) out(j, C(xr[j]));
  }
}

// Backward. Each block walks one chunk of rows (RPB at a time). Per row: dx
// from the row sums of g = dy * gamma and g * xhat. With COLS (rows up to
// 4096, see with_row_config_backward) every thread also keeps running dgamma/dbeta sums
// for its columns across the chunk; the block's groups combine them in
// order and write one partial per chunk (or the result, if one chunk).
// T: x, gamma, dy, dx (elementwise terms in C = compute_t<T>); S: mean,
// rstd; G: dgamma, dbeta.
// (Launch bounds ask for 1024 resident threads per SM: <= 64 registers.)
template <class T, class S, class G, int TH, int IT, int RPB, bool COLS>
__global__ void __launch_bounds__(TH* RPB, (TH * RPB >= 1024 ? 1 : 1024 / (TH * RPB)))
    k_layernorm_backward(std::size_t rows, std::size_t D, std::size_t rows_per_chunk, const T* x, const T* gamma,
                         const S* mean, const S* rstd, const T* dy, T* dx, double* partial,
                         G* dgamma, G* dbeta, bool accumulate) {
  using C = compute_t<T>;
  __shared__ double sd[RPB][2 * (TH / 32)];
  constexpr int NC = IT > 0 ? IT : 1;
  static_assert(!COLS || IT > 0);
  constexpr int CG = (COLS && RPB > 1) ? RPB * TH * IT : 1;
  __shared__ double cg[CG], cb[CG];
  const int g = int(threadIdx.x) / TH, t = int(threadIdx.x) % TH;
  const std::size_t r0 = std::size_t(blockIdx.x) * rows_per_chunk, r1 = d_min(rows, r0 + rows_per_chunk);
  C gm[NC];  // this thread's gamma columns
  double pg[NC], pb[NC];
#pragma unroll
  for (int k = 0; k < NC; ++k) {
    const std::size_t j = std::size_t(t) + std::size_t(k) * TH;
    gm[k] = (IT > 0 && gamma && j < D) ? C(gamma[j]) : C(1);
    pg[k] = 0;
    pb[k] = 0;
  }
  for (std::size_t base = r0; base < r1; base += RPB) {
    const std::size_t r = base + g;
    const bool active = r < r1;
    const double mu = active ? double(mean[r]) : 0.0, rs = active ? double(rstd[r]) : 0.0;
    const C mu_t = C(mu), rs_t = C(rs);
    const T* xr = x + (active ? r : 0) * D;
    const T* dyr = dy + (active ? r : 0) * D;
    double sg = 0, sgx = 0;
    C xv[NC], dv[NC];
    if constexpr (IT > 0) {
#pragma unroll
      for (int k = 0; k < IT; ++k) {
        const std::size_t j = std::size_t(t) + std::size_t(k) * TH;
        const bool in = active && j < D;
        xv[k] = in ? C(xr[j]) : C(0);
        dv[k] = in ? C(dyr[j]) : C(0);
        // Elementwise terms in C, sums in double: doubles for every cached
        // element would halve occupancy for ~1 ulp of C.
        const C gk = dv[k] * gm[k], xh = (xv[k] - mu_t) * rs_t;
        sg += double(gk);
        sgx += double(gk * xh);
        if constexpr (COLS) {
          pg[k] += double(dv[k] * xh);
          pb[k] += double(dv[k]);
        }
      }
    } else if (active) {
      for (std::size_t j = t; j < D; j += TH) {
        const double gk = double(dyr[j]) * (gamma ? double(gamma[j]) : 1.0);
        sg += gk;
        sgx += gk * ((double(xr[j]) - mu) * rs);
      }
    }
    if (dx) {
      group<TH>::sum2(sg, sgx, sd[g]);
      sg /= double(D);
      sgx /= double(D);
      if (active) {
        T* dxr = dx + r * D;
        const C sg_t = C(sg), sgx_t = C(sgx);
        (void)sg_t, (void)sgx_t;
        if constexpr (IT > 0) {
#pragma unroll
          for (int k = 0; k < IT; ++k) {
            const std::size_t j = std::size_t(t) + std::size_t(k) * TH;
            if (j < D) {
              const C gk = dv[k] * gm[k], xh = (xv[k] - mu_t) * rs_t;
              dxr[j] = T(rs_t * (gk - sg_t - xh * sgx_t));
            }
          }
        } else {
          for (std::size_t j = t; j < D; j += TH) {
            const double gk = double(dyr[j]) * (gamma ? double(gamma[j]) : 1.0);
            const double xh = (double(xr[j]) - mu) * rs;
            dxr[j] = T(rs * (gk - sg - xh * sgx));
          }
        }
      }
    }
  }
  if constexpr (COLS) {
    if constexpr (RPB > 1) {
#pragma unroll
      for (int k = 0; k < IT; ++k) {
        cg[(g * IT + k) * TH + t] = pg[k];
        cb[(g * IT + k) * TH + t] = pb[k];
      }
      __syncthreads();
      if (g != 0) return;
#pragma unroll
      for (int k = 0; k < IT; ++k) {
        double a = cg[k * TH + t], b = cb[k * TH + t];
        for (int h = 1; h < RPB; ++h) {
          a += cg[(h * IT + k) * TH + t];
          b += cb[(h * IT + k) * TH + t];
        }
        pg[k] = a;
        pb[k] = b;
      }
    }
#pragma unroll
    for (int k = 0; k < IT; ++k) {
      const std::size_t j = std::size_t(t) + std::size_t(k) * TH;
      if (j >= D) continue;
      if (partial) {
        partial[(blockIdx.x * std::size_t(2) + 0) * D + j] = pg[k];
        partial[(blockIdx.x * std::size_t(2) + 1) * D + j] = pb[k];
      } else {
        if (dgamma) dgamma[j] = G((accumulate ? double(dgamma[j]) : 0.0) + pg[k]);
        if (dbeta) dbeta[j] = G((accumulate ? double(dbeta[j]) : 0.0) + pb[k]);
      }
    }
  }
}

template <class T, class S>
struct layernorm_param_terms {
  const T* x;
  const T* dy;
  const S* mean;
  const S* rstd;
  std::size_t D;
  __device__ void operator()(std::size_t r, std::size_t c, double* acc) const {
    const double d = double(dy[r * D + c]);
    acc[0] += d * ((double(x[r * D + c]) - double(mean[r])) * double(rstd[r]));
    acc[1] += d;
  }
};

}  // namespace detail

// ---------------------------------------------------------------------------
// LayerNorm with each row's features spread over devices (2D/2.5D/3D tensor
// parallelism; the host's formulas, one thread per row): this device holds D of
// every row's `total` features, and the caller sums the 2·rows statistics over
// the devices of the row between the partial and the final step.
// ---------------------------------------------------------------------------
namespace detail {
template <class T, class S>
__global__ void k_layernorm_partial_moments(std::size_t rows, std::size_t D, const T* x, S* sums) {
  const std::size_t r = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  double s = 0, ss = 0;
  math::layernorm_row_moments<compute_t<T>>(x + r * D, D, s, ss);
  sums[r] = S(s);
  sums[rows + r] = S(ss);
}
template <class T, class S>
__global__ void k_layernorm_forward_moments(std::size_t rows, std::size_t D, std::size_t total, double eps, const T* x,
                                            const T* gamma, const T* beta, S* stats, T* y) {
  const std::size_t r = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  double mean = 0, rstd = 0;
  math::layernorm_moments_to_stats(double(stats[r]), double(stats[rows + r]), double(total), eps, mean, rstd);
  stats[r] = S(mean);
  stats[rows + r] = S(rstd);
  math::layernorm_row_normalize<compute_t<T>>(x + r * D, gamma, beta, D, double(stats[r]), double(stats[rows + r]),
                                              y + r * D);
}
template <class T, class S>
__global__ void k_layernorm_backward_partial(std::size_t rows, std::size_t D, const T* x, const T* gamma,
                                             const S* mean, const S* rstd, const T* dy, S* sums) {
  const std::size_t r = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  double sg = 0, sgx = 0;
  math::layernorm_row_grad_sums<compute_t<T>>(x + r * D, gamma, dy + r * D, D, double(mean[r]), double(rstd[r]), sg,
                                              sgx);
  sums[r] = S(sg);
  sums[rows + r] = S(sgx);
}
template <class T, class S>
__global__ void k_layernorm_backward_moments(std::size_t rows, std::size_t D, std::size_t total, const T* x,
                                             const T* gamma, const S* mean, const S* rstd, const T* dy,
                                             const S* sums, T* dx) {
  const std::size_t r = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  math::layernorm_row_dx<compute_t<T>>(x + r * D, gamma, dy + r * D, D, double(mean[r]), double(rstd[r]),
                                       double(sums[r]) / double(total), double(sums[rows + r]) / double(total),
                                       dx + r * D);
}
inline unsigned row_blocks(std::size_t rows) { return static_cast<unsigned>((rows + 127) / 128); }
}  // namespace detail


// Static members on arguments the front has checked (impl::normalization_kernels<queue>).
struct normalization_kernels {
  template <class T, class S>
  static void layernorm_forward(queue& q, std::size_t rows, std::size_t D, const T* x, const T* gamma, const T* beta,
                                double eps, T* y, S* mean_out, S* rstd_out) {
    detail::with_row_config(D, [&](auto th, auto it, auto rpb) {
      constexpr int TH = decltype(th)::value, IT = decltype(it)::value, RPB = decltype(rpb)::value;
      detail::k_layernorm_forward<T, S, TH, IT, RPB><<<static_cast<unsigned>((rows + RPB - 1) / RPB), TH * RPB, 0,
                                                       q.stream()>>>(rows, D, x, gamma, beta, eps, y, mean_out,
                                                                     rstd_out);
    });
    STRATA_CUDA_CHECK_LAUNCH("k_layernorm_forward");
  }

  // dx and, for rows up to 4096 columns, dgamma/dbeta in one kernel; otherwise column sums apart.
  template <class T, class S, class G>
  static void layernorm_backward(queue& q, std::size_t rows, std::size_t D, const T* x, const T* gamma, const S* mean,
                                 const S* rstd, const T* dy, T* dx, G* dgamma, G* dbeta, bool accumulate) {
    const bool cols = dgamma || dbeta;
    if (rows == 0) {
      if (cols && !accumulate) {
        if (dgamma) STRATA_CUDA_CHECK(cudaMemsetAsync(dgamma, 0, D * sizeof(G), q.stream()));
        if (dbeta) STRATA_CUDA_CHECK(cudaMemsetAsync(dbeta, 0, D * sizeof(G), q.stream()));
      }
      return;
    }
    if (!dx && !cols) return;
    bool separate_cols = false;
    detail::with_row_config_backward(D, [&](auto th, auto it, auto rpb) {
      constexpr int TH = decltype(th)::value, IT = decltype(it)::value, RPB = decltype(rpb)::value;
      constexpr bool can_fuse = IT == 4;
      if constexpr (can_fuse) {
        if (cols) {
          const detail::chunking ch = detail::column_chunks(rows, D, 2, 4 * RPB, 512);
          detail::scratch sc;
          double* partial = nullptr;
          if (ch.chunks > 1) {
            sc = detail::get_scratch(q, ch.chunks * 2 * D * sizeof(double));
            partial = reinterpret_cast<double*>(sc.p);
          }
          detail::k_layernorm_backward<T, S, G, TH, IT, RPB, true>
              <<<static_cast<unsigned>(ch.chunks), TH * RPB, 0, q.stream()>>>(
                  rows, D, ch.rows_per_chunk, x, gamma, mean, rstd, dy, dx, partial, dgamma, dbeta, accumulate);
          STRATA_CUDA_CHECK_LAUNCH("k_layernorm_backward");
          if (partial) {
            detail::k_colsum_final<G, 2><<<detail::flat_grid(q, D), detail::flat_threads, 0, q.stream()>>>(
                ch.chunks, D, partial, dgamma, dbeta, accumulate);
            STRATA_CUDA_CHECK_LAUNCH("k_colsum_final");
          }
          return;
        }
      }
      separate_cols = cols;
      if (!dx) return;
      detail::k_layernorm_backward<T, S, G, TH, IT, RPB, false>
          <<<static_cast<unsigned>((rows + RPB - 1) / RPB), TH * RPB, 0, q.stream()>>>(
              rows, D, RPB, x, gamma, mean, rstd, dy, dx, static_cast<double*>(nullptr), dgamma, dbeta, accumulate);
      STRATA_CUDA_CHECK_LAUNCH("k_layernorm_backward");
    });
    if (separate_cols)
      detail::column_sums<G, 2>(q, rows, D, detail::layernorm_param_terms<T, S>{x, dy, mean, rstd, D}, dgamma, dbeta,
                                accumulate);
  }

  // The spread-row pieces: one thread per row (the host's formulas).
  template <class T, class S>
  static void layernorm_partial_moments(queue& q, std::size_t rows, std::size_t D, const T* x, S* sums) {
    detail::k_layernorm_partial_moments<T, S><<<detail::row_blocks(rows), 128, 0, q.stream()>>>(rows, D, x, sums);
    STRATA_CUDA_CHECK_LAUNCH("k_layernorm_partial_moments");
  }

  template <class T, class S>
  static void layernorm_forward_moments(queue& q, std::size_t rows, std::size_t D, std::size_t total, double eps,
                                        const T* x, const T* gamma, const T* beta, S* stats, T* y) {
    detail::k_layernorm_forward_moments<T, S>
        <<<detail::row_blocks(rows), 128, 0, q.stream()>>>(rows, D, total, eps, x, gamma, beta, stats, y);
    STRATA_CUDA_CHECK_LAUNCH("k_layernorm_forward_moments");
  }

  template <class T, class S>
  static void layernorm_backward_partial(queue& q, std::size_t rows, std::size_t D, const T* x, const T* gamma,
                                         const S* mean, const S* rstd, const T* dy, S* sums) {
    detail::k_layernorm_backward_partial<T, S>
        <<<detail::row_blocks(rows), 128, 0, q.stream()>>>(rows, D, x, gamma, mean, rstd, dy, sums);
    STRATA_CUDA_CHECK_LAUNCH("k_layernorm_backward_partial");
  }

  template <class T, class S>
  static void layernorm_backward_moments(queue& q, std::size_t rows, std::size_t D, std::size_t total, const T* x,
                                         const T* gamma, const S* mean, const S* rstd, const T* dy, const S* sums,
                                         T* dx) {
    detail::k_layernorm_backward_moments<T, S>
        <<<detail::row_blocks(rows), 128, 0, q.stream()>>>(rows, D, total, x, gamma, mean, rstd, dy, sums, dx);
    STRATA_CUDA_CHECK_LAUNCH("k_layernorm_backward_moments");
  }
};

}  // namespace strata::backend::cuda

namespace strata::backend::impl {
template <>
struct normalization_kernels<cuda::queue> : cuda::normalization_kernels {};
}  // namespace strata::backend::impl
