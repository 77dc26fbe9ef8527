#pragma once
// strata host backend, mixture of experts (layers/moe.hpp): routing (router softmax and
// top-k), capacity assignment, gathering tokens into per-expert rows, the weighted
// combine, the router's backward and the load-balancing loss's books. The per-element
// formulas are strata/core/moe_math.hpp's, shared with the CUDA backend; the experts'
// matrix products are GEMMs (gemm.hpp).
//
// Layouts: probs [rows, E]; choice and slot_of [rows, K] (choice j of token r at r·K + j);
// expert rows [E·cap, ·], expert e's slots at e·cap ...; token_of [E·cap] = r·K + j or −1.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "strata/backend/host/launch.hpp"
#include "strata/core/moe_math.hpp"

namespace strata::backend::host {

// probs = softmax(logits) per row (probs may alias logits); choice = each row's top K,
// from the probabilities as stored; stats[0, E) = choices per expert, stats[E, 2E) = Σ
// over rows of each expert's probability (in row order, double accumulation).
template <class T, class S>
void moe_route(queue& q, std::size_t rows, int E, int K, const T* logits, T* probs, std::int32_t* choice, S* stats) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  using C = detail::compute_t<T>;
  detail::need(E > 0 && K > 0 && K <= E, "moe_route", "need 0 < K <= E");
  detail::need((logits && probs && choice) || rows == 0, "moe_route", "null pointer");
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

// Capacity: slot_of and token_of from the choices (math::moe::assign_expert), experts in parallel.
inline void moe_assign(queue& q, std::size_t rows, int E, int K, std::size_t cap, const std::int32_t* choice,
                       std::int32_t* slot_of, std::int32_t* token_of) {
  detail::need((choice && slot_of && token_of) || rows == 0, "moe_assign", "null pointer");
  q.parallel_for(std::size_t(E), [&](std::size_t e) {
    math::moe::assign_expert(int(e), rows, K, cap, choice, slot_of, token_of);
  });
}

// Expert parallelism: this device's row for the part's all-gather (math::moe::rank_count):
// row[j·E + e] = choices of rank j that picked e, row[K·E + e] = stats[E + e] (Σ p_e).
template <class S>
void moe_route_counts(queue& q, std::size_t rows, int E, int K, const std::int32_t* choice, const S* stats, S* row) {
  static_assert(detail::is_real_v<S>);
  q.parallel_for(std::size_t(E), [&](std::size_t e) {
    for (int j = 0; j < K; ++j) row[std::size_t(j * E) + e] = math::moe::rank_count<S>(int(e), j, rows, K, choice);
    row[std::size_t(K * E) + e] = stats[std::size_t(E) + e];
  });
}

// Expert parallelism: slot_of, token_of and the micro-batch's stats from the gathered rows
// (math::moe::assign_expert_part), experts in parallel.
template <class S>
void moe_assign_part(queue& q, std::size_t rows, int E, int K, std::size_t cap, const S* table, int n, int index,
                     const std::int32_t* choice, std::int32_t* slot_of, std::int32_t* token_of, S* stats) {
  static_assert(detail::is_real_v<S>);
  detail::need(table && slot_of && token_of && stats, "moe_assign_part", "null pointer");
  const std::size_t stride = std::size_t(K + 1) * std::size_t(E);
  q.parallel_for(std::size_t(E), [&](std::size_t e) {
    math::moe::assign_expert_part(int(e), rows, E, K, cap, table, stride, n, index, choice, slot_of, token_of, stats);
  });
}

// xe[s] = x[token of slot s], zeros for empty slots: [slots, D].
template <class T>
void moe_gather(queue& q, std::size_t slots, std::size_t D, int K, const std::int32_t* token_of, const T* x, T* xe) {
  static_assert(detail::is_elem_v<T>);
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

// y[r] = Σ over r's kept choices j of probs[r, choice_j] · ye[routed row] (a dropped
// choice adds nothing).
template <class T>
void moe_combine(queue& q, std::size_t rows, std::size_t D, int E, int K, std::size_t cap, const std::int32_t* choice,
                 const std::int32_t* slot_of, const T* probs, const T* ye, T* y) {
  static_assert(detail::is_elem_v<T>);
  using C = detail::compute_t<T>;
  detail::for_rows(q, rows, D, [&](std::size_t r) {
    for (std::size_t d = 0; d < D; ++d)
      y[r * D + d] = math::moe::sum_choices<C>(r, d, D, E, K, cap, choice, slot_of, probs, ye, T(0.0f));
  });
}

// The combine's backward into the experts: dye[s] = probs[r, e] · dy[r] for the token r
// in slot s of expert e = s / cap, zeros for empty slots.
template <class T>
void moe_dispatch_grad(queue& q, std::size_t slots, std::size_t D, int E, int K, std::size_t cap,
                       const std::int32_t* token_of, const T* probs, const T* dy, T* dye) {
  static_assert(detail::is_elem_v<T>);
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

// The router's backward: per token, dp_e = Σ over its kept choices of e of dy·ye[routed
// row], plus aux_coef · picked_e (the load-balancing loss through P_e; picked = stats[0,
// E)), then dlogits = softmax'(dp) ([rows, E]).
template <class T, class S>
void moe_router_backward(queue& q, std::size_t rows, std::size_t D, int E, int K, std::size_t cap, const T* probs,
                         const std::int32_t* choice, const std::int32_t* slot_of, const T* dy, const T* ye,
                         const S* picked, double aux_coef, T* dlogits) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
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

// dx[r] = Σ over r's kept choices of dxe[routed row] (overwrites dx).
template <class T>
void moe_scatter(queue& q, std::size_t rows, std::size_t D, int K, std::size_t cap, const std::int32_t* choice,
                 const std::int32_t* slot_of, const T* dxe, T* dx) {
  static_assert(detail::is_elem_v<T>);
  using C = detail::compute_t<T>;
  detail::for_rows(q, rows, D, [&](std::size_t r) {
    for (std::size_t d = 0; d < D; ++d)
      dx[r * D + d] =
          math::moe::sum_choices<C>(r, d, D, 0, K, cap, choice, slot_of, static_cast<const T*>(nullptr), dxe, T(0.0f));
  });
}

// The load-balancing loss into the step's books: acc[0] += weight · value_coef · Σ_e
// picked_e · psum_e (stats as moe_route left them, summed over the micro-batch's devices).
template <class S>
void moe_aux_accumulate(queue&, int E, const S* stats, double value_coef, double weight, double* acc) {
  static_assert(detail::is_real_v<S>);
  double s = 0;
  for (int e = 0; e < E; ++e) s += double(stats[e]) * double(stats[E + e]);
  acc[0] += weight * value_coef * s;
}

}  // namespace strata::backend::host
