// strata-header: cuda-only
#pragma once
// strata CUDA backend, mixture of experts: the CUDA implementation of backend/moe.hpp
// (layouts and contracts there), each per-row or per-element formula from
// strata/core/moe_math.hpp. Plain grid-stride kernels (one thread per token, slot or
// expert): the experts' GEMMs dominate. Deterministic: every output has one writer with a
// fixed order, the per-expert statistics are summed by one thread per expert in row order.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "strata/backend/cuda/device.cuh"
#include "strata/backend/moe.hpp"
#include "strata/core/moe_math.hpp"

namespace strata::backend::cuda {

namespace detail {

inline unsigned moe_blocks(std::size_t n) {
  const std::size_t b = (n + 255) / 256;
  return static_cast<unsigned>(b < 1 ? 1 : b > 65535 ? 65535 : b);
}
#define STRATA_MOE_LOOP(i, n) \
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < (n); i += std::size_t(gridDim.x) * blockDim.x)

template <class T>
__global__ void k_moe_route_rows(std::size_t rows, int E, int K, const T* logits, T* probs, std::int32_t* choice) {
  using C = compute_t<T>;
  STRATA_MOE_LOOP(r, rows) {
    math::moe::softmax_row<C>(E, logits + r * E, probs + r * E);
    math::moe::top_k(E, K, probs + r * E, choice + r * K);
  }
}
template <class T, class S>
__global__ void k_moe_route_stats(std::size_t rows, int E, int K, const T* probs, const std::int32_t* choice,
                                  S* stats) {
  STRATA_MOE_LOOP(e, std::size_t(E)) {
    double picked = 0, psum = 0;
    for (std::size_t r = 0; r < rows; ++r) {
      for (int j = 0; j < K; ++j) picked += choice[r * K + j] == int(e) ? 1.0 : 0.0;
      psum += double(compute_t<T>(probs[r * E + e]));
    }
    stats[e] = S(picked);
    stats[E + e] = S(psum);
  }
}
template <class I>
__global__ void k_moe_assign(std::size_t rows, int E, int K, std::size_t cap, const I* choice, I* slot_of,
                             I* token_of) {
  STRATA_MOE_LOOP(e, std::size_t(E)) math::moe::assign_expert(int(e), rows, K, cap, choice, slot_of, token_of);
}
template <class S>
__global__ void k_moe_route_counts(std::size_t rows, int E, int K, const std::int32_t* choice, const S* stats, S* row) {
  STRATA_MOE_LOOP(e, std::size_t(E)) {
    for (int j = 0; j < K; ++j) row[std::size_t(j * E) + e] = math::moe::rank_count<S>(int(e), j, rows, K, choice);
    row[std::size_t(K * E) + e] = stats[std::size_t(E) + e];
  }
}
template <class S>
__global__ void k_moe_assign_part(std::size_t rows, int E, int K, std::size_t cap, const S* table, int n, int index,
                                  const std::int32_t* choice, std::int32_t* slot_of, std::int32_t* token_of, S* stats) {
  const std::size_t stride = std::size_t(K + 1) * std::size_t(E);
  STRATA_MOE_LOOP(e, std::size_t(E))
  math::moe::assign_expert_part(int(e), rows, E, K, cap, table, stride, n, index, choice, slot_of, token_of, stats);
}
template <class T>
__global__ void k_moe_gather(std::size_t slots, std::size_t D, int K, const std::int32_t* token_of, const T* x, T* xe) {
  STRATA_MOE_LOOP(i, slots * D) {
    const std::size_t s = i / D, d = i - s * D;
    const std::int32_t c = token_of[s];
    xe[i] = c < 0 ? d_zero<T>() : x[std::size_t(c / K) * D + d];
  }
}
template <class T>
__global__ void k_moe_combine(std::size_t rows, std::size_t D, int E, int K, std::size_t cap,
                              const std::int32_t* choice, const std::int32_t* slot_of, const T* probs, const T* ye,
                              T* y) {
  using C = compute_t<T>;
  STRATA_MOE_LOOP(i, rows * D) {
    const std::size_t r = i / D, d = i - r * D;
    y[i] = math::moe::sum_choices<C>(r, d, D, E, K, cap, choice, slot_of, probs, ye, d_zero<T>());
  }
}
template <class T>
__global__ void k_moe_dispatch_grad(std::size_t slots, std::size_t D, int E, int K, std::size_t cap,
                                    const std::int32_t* token_of, const T* probs, const T* dy, T* dye) {
  using C = compute_t<T>;
  STRATA_MOE_LOOP(i, slots * D) {
    const std::size_t s = i / D, d = i - s * D;
    const std::int32_t c = token_of[s];
    if (c < 0) {
      dye[i] = d_zero<T>();
    } else {
      const std::size_t r = std::size_t(c / K);
      dye[i] = T(C(probs[r * E + s / cap]) * C(dy[r * D + d]));
    }
  }
}
// One thread per token; E is at most moe_max_experts here (the router's gradient row
// lives in registers/local memory).
inline constexpr int moe_max_experts = 256;
template <class T, class S>
__global__ void k_moe_router_backward(std::size_t rows, std::size_t D, int E, int K, std::size_t cap, const T* probs,
                                      const std::int32_t* choice, const std::int32_t* slot_of, const T* dy,
                                      const T* ye, const S* picked, double aux_coef, T* dlogits) {
  using C = compute_t<T>;
  STRATA_MOE_LOOP(r, rows) {
    C g[moe_max_experts];
    math::moe::router_grad_row(r, D, E, K, cap, probs, choice, slot_of, dy, ye, picked, aux_coef, g);
    for (int e = 0; e < E; ++e) dlogits[r * E + e] = T(g[e]);
  }
}
template <class T>
__global__ void k_moe_scatter(std::size_t rows, std::size_t D, int K, std::size_t cap, const std::int32_t* choice,
                              const std::int32_t* slot_of, const T* dxe, T* dx) {
  using C = compute_t<T>;
  STRATA_MOE_LOOP(i, rows * D) {
    const std::size_t r = i / D, d = i - r * D;
    dx[i] = math::moe::sum_choices<C>(r, d, D, 0, K, cap, choice, slot_of, static_cast<const T*>(nullptr), dxe,
                                      d_zero<T>());
  }
}
template <class S>
__global__ void k_moe_aux_accumulate(int E, const S* stats, double value_coef, double weight, double* acc) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  double s = 0;
  for (int e = 0; e < E; ++e) s += double(stats[e]) * double(stats[E + e]);
  acc[0] += weight * value_coef * s;
}
#undef STRATA_MOE_LOOP

}  // namespace detail

// Static members on arguments the front has checked (impl::moe_kernels<queue>).
struct moe_kernels {
  // The statistics kernel runs for rows == 0 too: it writes zeros.
  template <class T, class S>
  static void moe_route(queue& q, std::size_t rows, int E, int K, const T* logits, T* probs, std::int32_t* choice,
                        S* stats) {
    if (rows > 0) {
      detail::k_moe_route_rows<T><<<detail::moe_blocks(rows), 256, 0, q.stream()>>>(rows, E, K, logits, probs, choice);
      STRATA_CUDA_CHECK_LAUNCH("k_moe_route_rows");
    }
    detail::k_moe_route_stats<T, S><<<detail::moe_blocks(std::size_t(E)), 256, 0, q.stream()>>>(rows, E, K, probs,
                                                                                                choice, stats);
    STRATA_CUDA_CHECK_LAUNCH("k_moe_route_stats");
  }

  // For rows == 0 too: every slot becomes empty.
  static void moe_assign(queue& q, std::size_t rows, int E, int K, std::size_t cap, const std::int32_t* choice,
                         std::int32_t* slot_of, std::int32_t* token_of) {
    detail::k_moe_assign<std::int32_t><<<detail::moe_blocks(std::size_t(E)), 256, 0, q.stream()>>>(
        rows, E, K, cap, choice, slot_of, token_of);
    STRATA_CUDA_CHECK_LAUNCH("k_moe_assign");
  }

  template <class S>
  static void moe_route_counts(queue& q, std::size_t rows, int E, int K, const std::int32_t* choice, const S* stats,
                               S* row) {
    detail::k_moe_route_counts<S><<<detail::moe_blocks(std::size_t(E)), 256, 0, q.stream()>>>(rows, E, K, choice,
                                                                                            stats, row);
    STRATA_CUDA_CHECK_LAUNCH("k_moe_route_counts");
  }

  template <class S>
  static void moe_assign_part(queue& q, std::size_t rows, int E, int K, std::size_t cap, const S* table, int n,
                              int index, const std::int32_t* choice, std::int32_t* slot_of, std::int32_t* token_of,
                              S* stats) {
    detail::k_moe_assign_part<S><<<detail::moe_blocks(std::size_t(E)), 256, 0, q.stream()>>>(
        rows, E, K, cap, table, n, index, choice, slot_of, token_of, stats);
    STRATA_CUDA_CHECK_LAUNCH("k_moe_assign_part");
  }

  template <class T>
  static void moe_gather(queue& q, std::size_t slots, std::size_t D, int K, const std::int32_t* token_of, const T* x,
                         T* xe) {
    detail::k_moe_gather<T><<<detail::moe_blocks(slots * D), 256, 0, q.stream()>>>(slots, D, K, token_of, x, xe);
    STRATA_CUDA_CHECK_LAUNCH("k_moe_gather");
  }

  template <class T>
  static void moe_combine(queue& q, std::size_t rows, std::size_t D, int E, int K, std::size_t cap,
                          const std::int32_t* choice, const std::int32_t* slot_of, const T* probs, const T* ye, T* y) {
    detail::k_moe_combine<T><<<detail::moe_blocks(rows * D), 256, 0, q.stream()>>>(rows, D, E, K, cap, choice,
                                                                                    slot_of, probs, ye, y);
    STRATA_CUDA_CHECK_LAUNCH("k_moe_combine");
  }

  template <class T>
  static void moe_dispatch_grad(queue& q, std::size_t slots, std::size_t D, int E, int K, std::size_t cap,
                                const std::int32_t* token_of, const T* probs, const T* dy, T* dye) {
    detail::k_moe_dispatch_grad<T><<<detail::moe_blocks(slots * D), 256, 0, q.stream()>>>(slots, D, E, K, cap,
                                                                                           token_of, probs, dy, dye);
    STRATA_CUDA_CHECK_LAUNCH("k_moe_dispatch_grad");
  }

  // One thread per token, its gradient row in registers: at most moe_max_experts experts.
  template <class T, class S>
  static void moe_router_backward(queue& q, std::size_t rows, std::size_t D, int E, int K, std::size_t cap,
                                  const T* probs, const std::int32_t* choice, const std::int32_t* slot_of, const T* dy,
                                  const T* ye, const S* picked, double aux_coef, T* dlogits) {
    detail::need(E <= detail::moe_max_experts, "moe_router_backward", "more than 256 experts");
    detail::k_moe_router_backward<T, S><<<detail::moe_blocks(rows), 256, 0, q.stream()>>>(
        rows, D, E, K, cap, probs, choice, slot_of, dy, ye, picked, aux_coef, dlogits);
    STRATA_CUDA_CHECK_LAUNCH("k_moe_router_backward");
  }

  template <class T>
  static void moe_scatter(queue& q, std::size_t rows, std::size_t D, int K, std::size_t cap,
                          const std::int32_t* choice, const std::int32_t* slot_of, const T* dxe, T* dx) {
    detail::k_moe_scatter<T><<<detail::moe_blocks(rows * D), 256, 0, q.stream()>>>(rows, D, K, cap, choice, slot_of,
                                                                                    dxe, dx);
    STRATA_CUDA_CHECK_LAUNCH("k_moe_scatter");
  }

  template <class S>
  static void moe_aux_accumulate(queue& q, int E, const S* stats, double value_coef, double weight, double* acc) {
    detail::k_moe_aux_accumulate<S><<<1, 32, 0, q.stream()>>>(E, stats, value_coef, weight, acc);
    STRATA_CUDA_CHECK_LAUNCH("k_moe_aux_accumulate");
  }
};

}  // namespace strata::backend::cuda

namespace strata::backend::impl {
template <>
struct moe_kernels<cuda::queue> : cuda::moe_kernels {};
}  // namespace strata::backend::impl
