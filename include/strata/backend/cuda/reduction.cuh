// strata-header: cuda-only
#pragma once
// strata CUDA backend, reductions: the CUDA implementation of backend/reduction.hpp
// (deterministic column sums, whole-tensor sums through CUB, the NaN/Inf scan).
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

#include <cub/device/device_reduce.cuh>

#include "strata/backend/cuda/device.cuh"
#include "strata/backend/reduction.hpp"

namespace strata::backend::cuda {

// ---------------------------------------------------------------------------
// Deterministic column sums (bias_grad, layernorm dgamma/dbeta fallback)
// ---------------------------------------------------------------------------

namespace detail {

template <class T, int NOUT, class F>
__global__ void __launch_bounds__(colsum_tx* colsum_ty)
    k_colsum_partial(std::size_t rows, std::size_t cols, std::size_t rows_per_chunk, F f, double* partial, T* out0,
                     T* out1, bool accumulate) {
  __shared__ double sm[NOUT][colsum_ty][colsum_tx + 1];
  const std::size_t c = blockIdx.x * std::size_t(colsum_tx) + threadIdx.x;
  const std::size_t r0 = blockIdx.y * rows_per_chunk, r1 = d_min(rows, r0 + rows_per_chunk);
  double acc[NOUT] = {};
  if (c < cols)
    for (std::size_t r = r0 + threadIdx.y; r < r1; r += colsum_ty) f(r, c, acc);
#pragma unroll
  for (int o = 0; o < NOUT; ++o) sm[o][threadIdx.y][threadIdx.x] = acc[o];
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  T* outs[2] = {out0, out1};
#pragma unroll
  for (int o = 0; o < NOUT; ++o) {
    double s = sm[o][0][threadIdx.x];
#pragma unroll
    for (int k = 1; k < colsum_ty; ++k) s += sm[o][k][threadIdx.x];
    if (!partial) {
      if (outs[o]) outs[o][c] = T((accumulate ? double(outs[o][c]) : 0.0) + s);
    } else {
      partial[(blockIdx.y * std::size_t(NOUT) + o) * cols + c] = s;
    }
  }
}

// Pass 2: out[c] (=|+=) sum over chunks of partial, in chunk order.
template <class T, int NOUT>
__global__ void k_colsum_final(std::size_t chunks, std::size_t cols, const double* partial, T* out0, T* out1,
                               bool accumulate) {
  T* outs[2] = {out0, out1};
  for (std::size_t c = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; c < cols;
       c += std::size_t(gridDim.x) * blockDim.x) {
#pragma unroll
    for (int o = 0; o < NOUT; ++o) {
      if (!outs[o]) continue;
      double s = 0;
      for (std::size_t ch = 0; ch < chunks; ++ch) s += partial[(ch * NOUT + o) * cols + c];
      outs[o][c] = T((accumulate ? double(outs[o][c]) : 0.0) + s);
    }
  }
}

template <class T, int NOUT, class F>
void column_sums(queue& q, std::size_t rows, std::size_t cols, F f, T* out0, T* out1, bool accumulate) {
  const chunking ch = column_chunks(rows, cols, NOUT, 128, 1024);
  scratch sc;
  double* partial = nullptr;
  if (ch.chunks > 1) {
    sc = get_scratch(q, ch.chunks * NOUT * cols * sizeof(double));
    partial = reinterpret_cast<double*>(sc.p);
  }
  const dim3 grid(static_cast<unsigned>((cols + colsum_tx - 1) / colsum_tx), static_cast<unsigned>(ch.chunks));
  k_colsum_partial<T, NOUT><<<grid, dim3(colsum_tx, colsum_ty), 0, q.stream()>>>(rows, cols, ch.rows_per_chunk, f,
                                                                                 partial, out0, out1, accumulate);
  STRATA_CUDA_CHECK_LAUNCH("k_colsum_partial");
  if (ch.chunks > 1) {
    k_colsum_final<T, NOUT><<<flat_grid(q, cols), flat_threads, 0, q.stream()>>>(ch.chunks, cols, partial, out0, out1,
                                                                                 accumulate);
    STRATA_CUDA_CHECK_LAUNCH("k_colsum_final");
  }
}

template <class T>
struct bias_grad_term {
  const T* dy;
  std::size_t cols;
  __device__ void operator()(std::size_t r, std::size_t c, double* acc) const { acc[0] += double(dy[r * cols + c]); }
};

struct sum_op {
  __host__ __device__ double operator()(double a, double b) const { return a + b; }
};
struct to_double {
  template <class T>
  __host__ __device__ double operator()(T v) const {
    return double(v);
  }
};
struct square_double {
  template <class T>
  __host__ __device__ double operator()(T v) const {
    return double(v) * double(v);
  }
};

template <class T, class Op>
double reduce_to_host(queue& q, std::size_t n, const T* x, Op op) {
  queue_state& s = q.state();
  double* out = &s.dev_slots->value;
  std::size_t temp = 0;
  STRATA_CUDA_CHECK(cub::DeviceReduce::TransformReduce(nullptr, temp, x, out, n, sum_op{}, op, 0.0, s.stream));
  scratch sc = get_scratch(q, temp);
  STRATA_CUDA_CHECK(cub::DeviceReduce::TransformReduce(sc.p, temp, x, out, n, sum_op{}, op, 0.0, s.stream));
  STRATA_CUDA_CHECK(cudaMemcpyAsync(&s.host_slots->value, out, sizeof(double), cudaMemcpyDeviceToHost, s.stream));
  q.synchronize();
  return s.host_slots->value;
}

template <class T, class U, U Mask>
__global__ void k_all_finite(std::size_t n, const T* x, unsigned int* flag) {
  bool bad = false;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    U bits;
    std::memcpy(&bits, x + i, sizeof bits);
    bad |= (bits & Mask) == Mask;
  }
  // Idempotent store of the same value: any order gives the same answer.
  if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1u;
}

// Exponent bits of T (all set: NaN or +-Inf), as an unsigned of T's size.
template <class T>
struct exponent_mask;
template <class T>
  requires is_half16_v<T>
struct exponent_mask<T> {
  using type = std::uint16_t;
  static constexpr type value = T::exponent_bits;
};
template <>
struct exponent_mask<float> {
  using type = std::uint32_t;
  static constexpr type value = 0x7f800000u;
};
template <>
struct exponent_mask<double> {
  using type = std::uint64_t;
  static constexpr type value = 0x7ff0000000000000ull;
};
}  // namespace detail

// Static members on arguments the front has checked (impl::reduction_kernels<queue>).
struct reduction_kernels {
  template <class T>
  static double sum(queue& q, std::size_t n, const T* x) {
    return detail::reduce_to_host(q, n, x, detail::to_double{});
  }

  template <class T>
  static double sum_squares(queue& q, std::size_t n, const T* x) {
    return detail::reduce_to_host(q, n, x, detail::square_double{});
  }

  // Ordinary host memory is accepted and checked on the host.
  template <class T>
  static bool all_finite(queue& q, std::size_t n, const T* x) {
    using U = typename detail::exponent_mask<T>::type;
    constexpr U mask = detail::exponent_mask<T>::value;
    static_assert(sizeof(U) == sizeof(T));
    if (detail::host_only_pointer(x)) {
      for (std::size_t i = 0; i < n; ++i) {
        U bits;
        std::memcpy(&bits, x + i, sizeof bits);
        if ((bits & mask) == mask) return false;
      }
      return true;
    }
    detail::queue_state& s = q.state();
    unsigned int* flag = &s.dev_slots->flag;
    STRATA_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof *flag, s.stream));
    detail::k_all_finite<T, U, mask><<<detail::flat_grid(q, n), detail::flat_threads, 0, s.stream>>>(n, x, flag);
    STRATA_CUDA_CHECK_LAUNCH("k_all_finite");
    STRATA_CUDA_CHECK(cudaMemcpyAsync(&s.host_slots->flag, flag, sizeof *flag, cudaMemcpyDeviceToHost, s.stream));
    q.synchronize();
    return s.host_slots->flag == 0u;
  }

  template <class T, class G>
  static void bias_grad(queue& q, std::size_t rows, std::size_t cols, const T* dy, G* dbias, bool accumulate) {
    if (rows == 0) {
      if (!accumulate) STRATA_CUDA_CHECK(cudaMemsetAsync(dbias, 0, cols * sizeof(G), q.stream()));
      return;
    }
    detail::column_sums<G, 1>(q, rows, cols, detail::bias_grad_term<T>{dy, cols}, dbias, static_cast<G*>(nullptr),
                              accumulate);
  }
};

}  // namespace strata::backend::cuda

namespace strata::backend::impl {
template <>
struct reduction_kernels<cuda::queue> : cuda::reduction_kernels {};
}  // namespace strata::backend::impl
