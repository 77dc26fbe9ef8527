// strata-header: cuda-only
#pragma once
// strata CUDA backend, batch normalisation: the CUDA implementation of
// backend/batchnorm.hpp (channel sums over the host's fixed chunks of rows, in its order).
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
#include "strata/backend/batchnorm.hpp"

namespace strata::backend::cuda {

// ---------------------------------------------------------------------------
// Batch normalisation (the host's formulas, core/math.hpp). Channel sums: one thread
// per (chunk of bn_chunk rows, channel) adds its rows in row order into a double
// partial, then one thread per channel adds the chunks in chunk order: the host's
// additions in the host's order, no atomics. Elementwise parts: one thread per element.
// ---------------------------------------------------------------------------
namespace detail {
inline constexpr std::size_t bn_chunk = backend::detail::batchnorm_chunk_rows;
__host__ __device__ inline std::size_t bn_chunks(std::size_t rows) { return (rows + bn_chunk - 1) / bn_chunk; }

// partial[(k·NOUT + o)·C + c] = Σ over chunk k's rows r of f(r, c, acc)'s term o.
template <int NOUT, class F>
__global__ void k_channel_partial(std::size_t rows, std::size_t C, F f, double* partial) {
  const std::size_t n = bn_chunks(rows) * C;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t k = i / C, c = i - k * C, r1 = d_min(rows, (k + 1) * bn_chunk);
    double acc[NOUT] = {};
    for (std::size_t r = k * bn_chunk; r < r1; ++r) f(r, c, acc);
#pragma unroll
    for (int o = 0; o < NOUT; ++o) partial[(k * NOUT + o) * C + c] = acc[o];
  }
}
template <int NOUT, class F>
void channel_partials(queue& q, std::size_t rows, std::size_t C, F f, double* partial) {
  if (rows == 0) return;
  k_channel_partial<NOUT><<<flat_grid(q, bn_chunks(rows) * C), flat_threads, 0, q.stream()>>>(rows, C, f, partial);
  STRATA_CUDA_CHECK_LAUNCH("k_channel_partial");
}

template <class T, class S>
struct channel_moment_term {  // Σx, or Σ(x − mean)² when mean is given
  const T* x;
  const S* mean;
  std::size_t C;
  __device__ void operator()(std::size_t r, std::size_t c, double* acc) const {
    if (mean) {
      const double d = double(x[r * C + c]) - double(mean[c]);
      acc[0] += d * d;
    } else {
      acc[0] += double(x[r * C + c]);
    }
  }
};
template <class T, class S>
struct batchnorm_grad_terms {  // Σdy, Σdy·x̂
  const T* x;
  const S* mean;
  const S* rstd;
  const T* dy;
  std::size_t C;
  __device__ void operator()(std::size_t r, std::size_t c, double* acc) const {
    const double g = double(dy[r * C + c]);
    acc[0] += g;
    acc[1] += g * (double(x[r * C + c]) - double(mean[c])) * double(rstd[c]);
  }
};

template <class S>
__global__ void k_channel_moment_final(std::size_t chunks, std::size_t C, const double* partial, S* sums) {
  for (std::size_t c = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; c < C;
       c += std::size_t(gridDim.x) * blockDim.x) {
    double s = 0;
    for (std::size_t k = 0; k < chunks; ++k) s += partial[k * C + c];
    sums[c] = S(s);
  }
}
template <class S, class G>
__global__ void k_batchnorm_sums_final(std::size_t chunks, std::size_t C, const double* partial, S* sums, G* dgamma,
                                       G* dbeta) {
  for (std::size_t c = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; c < C;
       c += std::size_t(gridDim.x) * blockDim.x) {
    double sd = 0, sdx = 0;
    for (std::size_t k = 0; k < chunks; ++k) {
      sd += partial[(2 * k) * C + c];
      sdx += partial[(2 * k + 1) * C + c];
    }
    sums[c] = S(sd);
    sums[C + c] = S(sdx);
    if (dbeta) dbeta[c] = G(double(dbeta[c]) + sd);
    if (dgamma) dgamma[c] = G(double(dgamma[c]) + sdx);
  }
}

template <class S>
__global__ void k_batchnorm_finish(std::size_t C, double count, double eps, S* mean, S* rstd) {
  for (std::size_t c = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; c < C;
       c += std::size_t(gridDim.x) * blockDim.x) {
    if (mean) mean[c] = S(double(mean[c]) / count);
    if (rstd) rstd[c] = S(math::batchnorm::rstd_of(double(rstd[c]), count, eps));
  }
}

template <class S>
__global__ void k_batchnorm_accumulate(std::size_t C, double count, const S* mean, const S* centered, S* sums) {
  for (std::size_t c = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; c < C;
       c += std::size_t(gridDim.x) * blockDim.x) {
    sums[c] = S(double(sums[c]) + double(mean[c]));
    sums[C + c] = S(double(sums[C + c]) + double(centered[c]) / (count - 1));
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) sums[2 * C] = S(double(sums[2 * C]) + 1);
}

// One block: every thread reads the micro-batch count before thread 0 zeroes it.
template <class S>
__global__ void k_batchnorm_fold(std::size_t C, double momentum, S* kept, S* sums) {
  const double n = double(sums[2 * C]);
  for (std::size_t c = threadIdx.x; c < 2 * C; c += blockDim.x) {
    if (n > 0) kept[c] = S(math::batchnorm::running(double(kept[c]), double(sums[c]) / n, momentum));
    sums[c] = S(0);
  }
  __syncthreads();
  if (threadIdx.x == 0) sums[2 * C] = S(0);
}

// y may alias x (each thread reads its element before writing it).
template <class T, class S>
__global__ void k_batchnorm_apply(std::size_t rows, std::size_t C, const T* x, const S* mean, const S* rstd,
                                  const T* gamma, const T* beta, T* y) {
  const std::size_t n = rows * C;
  const bool small = n <= 0xffffffffull;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t c = i - d_div(i, C, small) * C;
    y[i] = T(math::batchnorm::forward(double(x[i]), double(mean[c]), double(rstd[c]), gamma ? double(gamma[c]) : 1.0,
                                      beta ? double(beta[c]) : 0.0));
  }
}
template <class T, class S>
__global__ void k_batchnorm_backward_data(std::size_t rows, std::size_t C, double count, const T* x, const S* mean,
                                          const S* rstd, const T* gamma, const T* dy, const S* sums, T* dx) {
  const std::size_t n = rows * C;
  const bool small = n <= 0xffffffffull;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t c = i - d_div(i, C, small) * C;
    dx[i] = T(math::batchnorm::input_grad(double(x[i]), double(dy[i]), double(mean[c]), double(rstd[c]),
                                          gamma ? double(gamma[c]) : 1.0, double(sums[c]), double(sums[C + c]),
                                          count));
  }
}
}  // namespace detail

struct batchnorm_kernels {
  // Scratch: bn_chunks(rows)·C doubles (two per channel for the backward sums).
  template <class T, class S>
  static void channel_moment(queue& q, std::size_t rows, std::size_t C, const T* x, const S* mean, S* sums) {
    const std::size_t chunks = detail::bn_chunks(rows);
    detail::scratch sc = detail::get_scratch(q, chunks * C * sizeof(double));
    double* partial = reinterpret_cast<double*>(sc.p);
    detail::channel_partials<1>(q, rows, C, detail::channel_moment_term<T, S>{x, mean, C}, partial);
    detail::k_channel_moment_final<S>
        <<<detail::flat_grid(q, C), detail::flat_threads, 0, q.stream()>>>(chunks, C, partial, sums);
    STRATA_CUDA_CHECK_LAUNCH("k_channel_moment_final");
  }

  // mean and rstd are device memory: finished on the device (no synchronisation).
  template <class S>
  static void batchnorm_finish(queue& q, std::size_t C, double count, double eps, S* mean, S* rstd) {
    if (!mean && !rstd) return;
    detail::k_batchnorm_finish<S>
        <<<detail::flat_grid(q, C), detail::flat_threads, 0, q.stream()>>>(C, count, eps, mean, rstd);
    STRATA_CUDA_CHECK_LAUNCH("k_batchnorm_finish");
  }

  template <class S>
  static void batchnorm_accumulate(queue& q, std::size_t C, double count, const S* mean, const S* centered, S* sums) {
    detail::k_batchnorm_accumulate<S>
        <<<detail::flat_grid(q, C), detail::flat_threads, 0, q.stream()>>>(C, count, mean, centered, sums);
    STRATA_CUDA_CHECK_LAUNCH("k_batchnorm_accumulate");
  }

  template <class S>
  static void batchnorm_fold(queue& q, std::size_t C, double momentum, S* kept, S* sums) {
    detail::k_batchnorm_fold<S><<<1, 256, 0, q.stream()>>>(C, momentum, kept, sums);
    STRATA_CUDA_CHECK_LAUNCH("k_batchnorm_fold");
  }

  template <class T, class S>
  static void batchnorm_apply(queue& q, std::size_t rows, std::size_t C, const T* x, const S* mean, const S* rstd,
                              const T* gamma, const T* beta, T* y) {
    detail::k_batchnorm_apply<T, S><<<detail::flat_grid(q, rows * C), detail::flat_threads, 0, q.stream()>>>(
        rows, C, x, mean, rstd, gamma, beta, y);
    STRATA_CUDA_CHECK_LAUNCH("k_batchnorm_apply");
  }

  template <class T, class S, class G>
  static void batchnorm_backward_sums(queue& q, std::size_t rows, std::size_t C, const T* x, const S* mean,
                                      const S* rstd, const T* dy, S* sums, G* dgamma, G* dbeta) {
    const std::size_t chunks = detail::bn_chunks(rows);
    detail::scratch sc = detail::get_scratch(q, chunks * 2 * C * sizeof(double));
    double* partial = reinterpret_cast<double*>(sc.p);
    detail::channel_partials<2>(q, rows, C, detail::batchnorm_grad_terms<T, S>{x, mean, rstd, dy, C}, partial);
    detail::k_batchnorm_sums_final<S, G><<<detail::flat_grid(q, C), detail::flat_threads, 0, q.stream()>>>(
        chunks, C, partial, sums, dgamma, dbeta);
    STRATA_CUDA_CHECK_LAUNCH("k_batchnorm_sums_final");
  }

  template <class T, class S>
  static void batchnorm_backward_data(queue& q, std::size_t rows, std::size_t C, double count, const T* x,
                                      const S* mean, const S* rstd, const T* gamma, const T* dy, const S* sums,
                                      T* dx) {
    detail::k_batchnorm_backward_data<T, S><<<detail::flat_grid(q, rows * C), detail::flat_threads, 0, q.stream()>>>(
        rows, C, count, x, mean, rstd, gamma, dy, sums, dx);
    STRATA_CUDA_CHECK_LAUNCH("k_batchnorm_backward_data");
  }
};

}  // namespace strata::backend::cuda

namespace strata::backend::impl {
template <>
struct batchnorm_kernels<cuda::queue> : cuda::batchnorm_kernels {};
}  // namespace strata::backend::impl
