#pragma once
// The mixture-of-experts kernel family's front (dispatch.hpp; layers/moe.hpp calls it):
// routing (router softmax and top-k), capacity assignment, gathering tokens into
// per-expert rows, the weighted combine, the router's backward and the load-balancing
// loss's books. The per-element formulas are strata/core/moe_math.hpp's; the experts'
// matrix products are GEMMs (gemm.hpp). Deterministic: every output has one writer with
// a fixed order. Implementations: host/moe.hpp, cuda/moe.cuh.
//
// Layouts: probs [rows, E]; choice and slot_of [rows, K] (choice j of token r at r·K + j);
// expert rows [E·cap, ·], expert e's slots at e·cap ...; token_of [E·cap] = r·K + j or −1.
#include <cstddef>
#include <cstdint>

#include "strata/backend/dispatch.hpp"

namespace strata::backend {

namespace impl {
template <class Queue>
struct moe_kernels;
}  // namespace impl

inline namespace kernels {

// probs = softmax(logits) per row (probs may alias logits); choice = each row's top K,
// from the probabilities as stored; stats[0, E) = choices per expert, stats[E, 2E) = Σ
// over rows of each expert's probability (in row order, double accumulation; zeros when
// rows == 0).
template <class T, class S, kernel_queue Q>
void moe_route(Q& q, std::size_t rows, int E, int K, const T* logits, T* probs, std::int32_t* choice, S* stats) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  detail::need(E > 0 && K > 0 && K <= E, "moe_route", "need 0 < K <= E");
  detail::need(stats && (rows == 0 || (logits && probs && choice)), "moe_route", "null pointer");
  impl::moe_kernels<Q>::moe_route(q, rows, E, K, logits, probs, choice, stats);
}

// Capacity: slot_of and token_of from the choices (math::moe::assign_expert; every slot
// empty when rows == 0).
template <kernel_queue Q>
void moe_assign(Q& q, std::size_t rows, int E, int K, std::size_t cap, const std::int32_t* choice,
                std::int32_t* slot_of, std::int32_t* token_of) {
  detail::need(token_of && (rows == 0 || (choice && slot_of)), "moe_assign", "null pointer");
  impl::moe_kernels<Q>::moe_assign(q, rows, E, K, cap, choice, slot_of, token_of);
}

// Expert parallelism: this device's row for the part's all-gather (math::moe::rank_count):
// row[j·E + e] = choices of rank j that picked e, row[K·E + e] = stats[E + e] (Σ p_e).
template <class S, kernel_queue Q>
void moe_route_counts(Q& q, std::size_t rows, int E, int K, const std::int32_t* choice, const S* stats, S* row) {
  static_assert(detail::is_real_v<S>);
  impl::moe_kernels<Q>::moe_route_counts(q, rows, E, K, choice, stats, row);
}

// Expert parallelism: slot_of, token_of and the micro-batch's stats from the gathered rows
// (math::moe::assign_expert_part).
template <class S, kernel_queue Q>
void moe_assign_part(Q& q, std::size_t rows, int E, int K, std::size_t cap, const S* table, int n, int index,
                     const std::int32_t* choice, std::int32_t* slot_of, std::int32_t* token_of, S* stats) {
  static_assert(detail::is_real_v<S>);
  detail::need(table && slot_of && token_of && stats, "moe_assign_part", "null pointer");
  impl::moe_kernels<Q>::moe_assign_part(q, rows, E, K, cap, table, n, index, choice, slot_of, token_of, stats);
}

// xe[s] = x[token of slot s], zeros for empty slots: [slots, D].
template <class T, kernel_queue Q>
void moe_gather(Q& q, std::size_t slots, std::size_t D, int K, const std::int32_t* token_of, const T* x, T* xe) {
  static_assert(detail::is_elem_v<T>);
  if (slots * D == 0) return;
  impl::moe_kernels<Q>::moe_gather(q, slots, D, K, token_of, x, xe);
}

// y[r] = Σ over r's kept choices j of probs[r, choice_j] · ye[routed row] (a dropped
// choice adds nothing).
template <class T, kernel_queue Q>
void moe_combine(Q& q, std::size_t rows, std::size_t D, int E, int K, std::size_t cap, const std::int32_t* choice,
                 const std::int32_t* slot_of, const T* probs, const T* ye, T* y) {
  static_assert(detail::is_elem_v<T>);
  if (rows * D == 0) return;
  impl::moe_kernels<Q>::moe_combine(q, rows, D, E, K, cap, choice, slot_of, probs, ye, y);
}

// The combine's backward into the experts: dye[s] = probs[r, e] · dy[r] for the token r
// in slot s of expert e = s / cap, zeros for empty slots.
template <class T, kernel_queue Q>
void moe_dispatch_grad(Q& q, std::size_t slots, std::size_t D, int E, int K, std::size_t cap,
                       const std::int32_t* token_of, const T* probs, const T* dy, T* dye) {
  static_assert(detail::is_elem_v<T>);
  if (slots * D == 0) return;
  impl::moe_kernels<Q>::moe_dispatch_grad(q, slots, D, E, K, cap, token_of, probs, dy, dye);
}

// The router's backward: per token, dp_e = Σ over its kept choices of e of dy·ye[routed
// row], plus aux_coef · picked_e (the load-balancing loss through P_e; picked = stats[0,
// E)), then dlogits = softmax'(dp) ([rows, E]).
template <class T, class S, kernel_queue Q>
void moe_router_backward(Q& q, std::size_t rows, std::size_t D, int E, int K, std::size_t cap, const T* probs,
                         const std::int32_t* choice, const std::int32_t* slot_of, const T* dy, const T* ye,
                         const S* picked, double aux_coef, T* dlogits) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  if (rows == 0) return;
  impl::moe_kernels<Q>::moe_router_backward(q, rows, D, E, K, cap, probs, choice, slot_of, dy, ye, picked, aux_coef,
                                            dlogits);
}

// dx[r] = Σ over r's kept choices of dxe[routed row] (overwrites dx).
template <class T, kernel_queue Q>
void moe_scatter(Q& q, std::size_t rows, std::size_t D, int K, std::size_t cap, const std::int32_t* choice,
                 const std::int32_t* slot_of, const T* dxe, T* dx) {
  static_assert(detail::is_elem_v<T>);
  if (rows * D == 0) return;
  impl::moe_kernels<Q>::moe_scatter(q, rows, D, K, cap, choice, slot_of, dxe, dx);
}

// The load-balancing loss into the step's books: acc[0] += weight · value_coef · Σ_e
// picked_e · psum_e (stats as moe_route left them, summed over the micro-batch's devices).
template <class S, kernel_queue Q>
void moe_aux_accumulate(Q& q, int E, const S* stats, double value_coef, double weight, double* acc) {
  static_assert(detail::is_real_v<S>);
  impl::moe_kernels<Q>::moe_aux_accumulate(q, E, stats, value_coef, weight, acc);
}

}  // namespace kernels

}  // namespace strata::backend
