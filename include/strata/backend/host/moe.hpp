#pragma once
// strata host backend, mixture of experts: the host implementation of backend/moe.hpp
// (layouts and contracts there), experts or rows in parallel over the pool, the per-element
// formulas of strata/core/moe_math.hpp.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "strata/backend/host/launch.hpp"
#include "strata/backend/moe.hpp"
#include "strata/core/moe_math.hpp"

namespace strata::backend::host {

// Static members on arguments the front has checked (impl::moe_kernels<queue>).
struct moe_kernels {
  template <class T, class S>
  static void moe_route(queue& q, std::size_t rows, int E, int K, const T* logits, T* probs, std::int32_t* choice,
                        S* stats) {
    using C = detail::compute_t<T>;
    detail::for_rows(q, rows, std::size_t(E), [&](std::size_t r) {
      math::moe::softmax_row<C>(E, logits + r * E, probs + r * E);
      math::moe::top_k(E, K, probs + r * E, choice + r * K);
    });
    std::vector<double> acc(2 * std::size_t(E), 0.0);
    for (std::size_t r = 0; r < rows; ++r) {
      for (int j = 0; j < K; ++j) acc[std::size_t(choice[r * K + j])] += 1.0;
      for (int e = 0; e < E; ++e) acc[std::size_t(E + e)] += double(C(probs[r * E + e]));
    }
    for (std::size_t i = 0; i < acc.size(); ++i) stats[i] = S(acc[i]);
  }

  static void moe_assign(queue& q, std::size_t rows, int E, int K, std::size_t cap, const std::int32_t* choice,
                         std::int32_t* slot_of, std::int32_t* token_of) {
    q.parallel_for(std::size_t(E), [&](std::size_t e) {
      math::moe::assign_expert(int(e), rows, K, cap, choice, slot_of, token_of);
    });
  }

  template <class S>
  static void moe_route_counts(queue& q, std::size_t rows, int E, int K, const std::int32_t* choice, const S* stats,
                               S* row) {
    q.parallel_for(std::size_t(E), [&](std::size_t e) {
      for (int j = 0; j < K; ++j) row[std::size_t(j * E) + e] = math::moe::rank_count<S>(int(e), j, rows, K, choice);
      row[std::size_t(K * E) + e] = stats[std::size_t(E) + e];
    });
  }

  template <class S>
  static void moe_assign_part(queue& q, std::size_t rows, int E, int K, std::size_t cap, const S* table, int n,
                              int index, const std::int32_t* choice, std::int32_t* slot_of, std::int32_t* token_of,
                              S* stats) {
    const std::size_t stride = std::size_t(K + 1) * std::size_t(E);
    q.parallel_for(std::size_t(E), [&](std::size_t e) {
      math::moe::assign_expert_part(int(e), rows, E, K, cap, table, stride, n, index, choice, slot_of, token_of,
                                    stats);
    });
  }

  template <class T>
  static void moe_gather(queue& q, std::size_t slots, std::size_t D, int K, const std::int32_t* token_of, const T* x,
                         T* xe) {
    detail::for_rows(q, slots, D, [&](std::size_t s) {
      const std::int32_t c = token_of[s];
      T* o = xe + s * D;
      if (c < 0) {
        for (std::size_t d = 0; d < D; ++d) o[d] = T(0.0f);
        return;
      }
      const T* i = x + std::size_t(c / K) * D;
      for (std::size_t d = 0; d < D; ++d) o[d] = i[d];
    });
  }

  template <class T>
  static void moe_combine(queue& q, std::size_t rows, std::size_t D, int E, int K, std::size_t cap,
                          const std::int32_t* choice, const std::int32_t* slot_of, const T* probs, const T* ye, T* y) {
    using C = detail::compute_t<T>;
    detail::for_rows(q, rows, D, [&](std::size_t r) {
      for (std::size_t d = 0; d < D; ++d)
        y[r * D + d] = math::moe::sum_choices<C>(r, d, D, E, K, cap, choice, slot_of, probs, ye, T(0.0f));
    });
  }

  template <class T>
  static void moe_dispatch_grad(queue& q, std::size_t slots, std::size_t D, int E, int K, std::size_t cap,
                                const std::int32_t* token_of, const T* probs, const T* dy, T* dye) {
    using C = detail::compute_t<T>;
    detail::for_rows(q, slots, D, [&](std::size_t s) {
      const std::int32_t c = token_of[s];
      T* o = dye + s * D;
      if (c < 0) {
        for (std::size_t d = 0; d < D; ++d) o[d] = T(0.0f);
        return;
      }
      const std::size_t r = std::size_t(c / K);
      const C w = C(probs[r * E + s / cap]);
      for (std::size_t d = 0; d < D; ++d) o[d] = T(w * C(dy[r * D + d]));
    });
  }

  template <class T, class S>
  static void moe_router_backward(queue& q, std::size_t rows, std::size_t D, int E, int K, std::size_t cap,
                                  const T* probs, const std::int32_t* choice, const std::int32_t* slot_of, const T* dy,
                                  const T* ye, const S* picked, double aux_coef, T* dlogits) {
    using C = detail::compute_t<T>;
    detail::for_rows(q, rows, std::size_t(E) * D, [&](std::size_t r) {
      C dp[64];
      std::vector<C> big;
      C* g = dp;
      if (E > 64) big.resize(std::size_t(E)), g = big.data();
      math::moe::router_grad_row(r, D, E, K, cap, probs, choice, slot_of, dy, ye, picked, aux_coef, g);
      for (int e = 0; e < E; ++e) dlogits[r * E + e] = T(g[e]);
    });
  }

  template <class T>
  static void moe_scatter(queue& q, std::size_t rows, std::size_t D, int K, std::size_t cap, const std::int32_t* choice,
                          const std::int32_t* slot_of, const T* dxe, T* dx) {
    using C = detail::compute_t<T>;
    detail::for_rows(q, rows, D, [&](std::size_t r) {
      for (std::size_t d = 0; d < D; ++d)
        dx[r * D + d] = math::moe::sum_choices<C>(r, d, D, 0, K, cap, choice, slot_of, static_cast<const T*>(nullptr),
                                                  dxe, T(0.0f));
    });
  }

  template <class S>
  static void moe_aux_accumulate(queue&, int E, const S* stats, double value_coef, double weight, double* acc) {
    double s = 0;
    for (int e = 0; e < E; ++e) s += double(stats[e]) * double(stats[E + e]);
    acc[0] += weight * value_coef * s;
  }
};

}  // namespace strata::backend::host

namespace strata::backend::impl {
template <>
struct moe_kernels<host::queue> : host::moe_kernels {};
}  // namespace strata::backend::impl
