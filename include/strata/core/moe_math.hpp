#pragma once
// The mixture-of-experts formulas (layers/moe.hpp), written once for host and device
// code: both backends' routing, capacity, combine and router-gradient kernels call these,
// so every backend routes, drops and weighs the same tokens.
#include <cstddef>
#include <cstdint>

#include "strata/core/hd.hpp"
#include "strata/core/math.hpp"

namespace strata::math::moe {

// An expert's slots per micro-batch on a device: ceil(percent/100 · rows · top_k / experts),
// at least 1 and at most rows (a token picks an expert once).
STRATA_HD constexpr long long capacity(long long rows, int experts, int top_k, int percent) {
  const long long den = 100LL * experts;
  const long long c = (static_cast<long long>(percent) * rows * top_k + den - 1) / den;
  return c < 1 ? 1 : c > rows ? rows : c;
}

// p = softmax(x) over one row of n logits, max subtracted, in the compute type C.
template <class C, class In, class Out>
STRATA_HD inline void softmax_row(int n, const In* x, Out* p) {
  C m = C(x[0]);
  for (int j = 1; j < n; ++j) m = C(x[j]) > m ? C(x[j]) : m;
  C s = C(0);
  for (int j = 0; j < n; ++j) s += exp_of(C(x[j]) - m);
  const C inv = C(1) / s;
  for (int j = 0; j < n; ++j) p[j] = Out(exp_of(C(x[j]) - m) * inv);
}

// The k largest of p[0..n), largest first; ties go to the lower index (strict '>').
template <class V>
STRATA_HD inline void top_k(int n, int k, const V* p, std::int32_t* out) {
  for (int s = 0; s < k; ++s) {
    int best = -1;
    for (int e = 0; e < n; ++e) {
      bool taken = false;
      for (int j = 0; j < s; ++j) taken = taken || out[j] == e;
      if (!taken && (best < 0 || p[e] > p[best])) best = e;
    }
    out[s] = best;
  }
}

// Expert e's slots: the choices (token r, rank j) that picked e, visited first choices
// first and in token order, take slots 0, 1, ... until `cap`; later ones are dropped
// (slot_of = −1). token_of[e·cap + s] = r·k + j of slot s, −1 while empty. Each expert
// writes only its own entries, so experts may run in parallel. Returns how many choices
// picked e (before dropping: the load-balancing loss counts them).
STRATA_HD inline long long assign_expert(int e, std::size_t rows, int k, std::size_t cap, const std::int32_t* choice,
                                         std::int32_t* slot_of, std::int32_t* token_of) {
  std::size_t used = 0;
  long long picked = 0;
  for (int j = 0; j < k; ++j)
    for (std::size_t r = 0; r < rows; ++r) {
      const std::size_t c = r * std::size_t(k) + std::size_t(j);
      if (choice[c] != e) continue;
      ++picked;
      if (used < cap) {
        slot_of[c] = static_cast<std::int32_t>(used);
        token_of[std::size_t(e) * cap + used] = static_cast<std::int32_t>(c);
        ++used;
      } else {
        slot_of[c] = -1;
      }
    }
  for (std::size_t s = used; s < cap; ++s) token_of[std::size_t(e) * cap + s] = -1;
  return picked;
}

// Expert parallelism (MoE under Split<n>): device `index` of n holds a contiguous block of
// the micro-batch's tokens. row[j·E + e] = this device's choices of rank j that picked e;
// row[K·E + e] = its Σ of p_e (the routing statistics); the part all-gathers the rows.
template <class S>
STRATA_HD inline S rank_count(int e, int j, std::size_t rows, int k, const std::int32_t* choice) {
  double n = 0;
  for (std::size_t r = 0; r < rows; ++r) n += choice[r * std::size_t(k) + std::size_t(j)] == e ? 1.0 : 0.0;
  return S(n);
}

// Expert e's slots over the whole micro-batch as one device assigns them (first choices
// first, in the micro-batch's token order), from the gathered rows (table[p·stride + ·]
// is device p's row): this device's choices of rank j that picked e start at slot Σ over
// ranks j' < j of every device's count + Σ over devices p < index of rank j's count.
// slot_of as assign_expert, a slot global in [0, cap); token_of[e·cap + s] = this
// device's r·k + j in slot s, −1 for slots empty or filled by another device. stats[e],
// stats[E + e]: the micro-batch's choice count and probability sum of e.
template <class S>
STRATA_HD inline void assign_expert_part(int e, std::size_t rows, int E, int k, std::size_t cap, const S* table,
                                         std::size_t stride, int n, int index, const std::int32_t* choice,
                                         std::int32_t* slot_of, std::int32_t* token_of, S* stats) {
  for (std::size_t s = 0; s < cap; ++s) token_of[std::size_t(e) * cap + s] = -1;
  long long before = 0;
  double picked = 0, psum = 0;
  for (int j = 0; j < k; ++j) {
    long long used = before;
    for (int p = 0; p < n; ++p) {
      const long long cnt = static_cast<long long>(double(table[std::size_t(p) * stride + std::size_t(j * E + e)]));
      if (p < index) used += cnt;
      before += cnt;
      picked += double(cnt);
    }
    for (std::size_t r = 0; r < rows; ++r) {
      const std::size_t c = r * std::size_t(k) + std::size_t(j);
      if (choice[c] != e) continue;
      if (used >= 0 && static_cast<std::size_t>(used) < cap) {
        slot_of[c] = static_cast<std::int32_t>(used);
        token_of[std::size_t(e) * cap + std::size_t(used)] = static_cast<std::int32_t>(c);
      } else {
        slot_of[c] = -1;
      }
      ++used;
    }
  }
  for (int p = 0; p < n; ++p) psum += double(table[std::size_t(p) * stride + std::size_t(k * E + e)]);
  stats[e] = S(picked);
  stats[E + e] = S(psum);
}

// Where token r's choice j's expert output lives: its row in the [experts·cap, D]
// expert buffers, or −1 when the expert was full.
STRATA_HD inline long long routed_row(std::size_t r, int j, int k, std::size_t cap, const std::int32_t* choice,
                                      const std::int32_t* slot_of) {
  const std::size_t c = r * std::size_t(k) + std::size_t(j);
  return slot_of[c] < 0 ? -1 : static_cast<long long>(std::size_t(choice[c]) * cap + std::size_t(slot_of[c]));
}

// Element d of token r summed over its kept choices j of src[routed row], each times
// probs[r, choice_j] when probs is given (the combine) or 1 (the input gradient's
// scatter); rounded to T after each term, in choice order. `zero` is T's zero.
template <class C, class T>
STRATA_HD inline T sum_choices(std::size_t r, std::size_t d, std::size_t D, int E, int K, std::size_t cap,
                               const std::int32_t* choice, const std::int32_t* slot_of, const T* probs, const T* src,
                               T zero) {
  T o = zero;
  for (int j = 0; j < K; ++j) {
    const long long row = routed_row(r, j, K, cap, choice, slot_of);
    if (row < 0) continue;
    const C v = C(src[std::size_t(row) * D + d]);
    o = T(C(o) + (probs ? C(probs[r * std::size_t(E) + std::size_t(choice[r * std::size_t(K) + std::size_t(j)])]) * v : v));
  }
  return o;
}

// Switch's load-balancing loss over a micro-batch of `tokens` tokens:
//   aux = alpha · E · Σ_e f_e · P_e,  f_e = picked_e / (tokens · k),  P_e = Σ_t p_te / tokens;
// value_coef · Σ_e picked_e · psum_e is aux, and d aux / d p_te = grad_coef · picked_e
// (the counts are constants: top-k selection has no gradient).
STRATA_HD constexpr double aux_value_coef(int experts, int k, double tokens, double alpha) {
  return alpha * experts / (tokens * k * tokens);
}
STRATA_HD constexpr double aux_grad_coef(int experts, int k, double tokens, double alpha) {
  return aux_value_coef(experts, k, tokens, alpha);
}

// Softmax backward of one token's router in place: dp → dlogits = p ⊙ (dp − Σ_j p_j dp_j).
template <class C, class P>
STRATA_HD inline void softmax_backward_row(int n, const P* p, C* dp) {
  C dot = C(0);
  for (int j = 0; j < n; ++j) dot += C(p[j]) * dp[j];
  for (int j = 0; j < n; ++j) dp[j] = C(p[j]) * (dp[j] - dot);
}

// Token r's router gradient d(loss)/d(logits) into g[0..E): the aux loss's share
// (aux_coef · picked_e) plus, for each kept choice, dy · expert output, then the
// softmax's backward.
template <class C, class T, class S>
STRATA_HD inline void router_grad_row(std::size_t r, std::size_t D, int E, int K, std::size_t cap, const T* probs,
                                      const std::int32_t* choice, const std::int32_t* slot_of, const T* dy,
                                      const T* ye, const S* picked, double aux_coef, C* g) {
  for (int e = 0; e < E; ++e) g[e] = C(aux_coef * double(picked[e]));
  for (int j = 0; j < K; ++j) {
    const long long row = routed_row(r, j, K, cap, choice, slot_of);
    if (row < 0) continue;
    C dot = C(0);
    for (std::size_t d = 0; d < D; ++d) dot += C(dy[r * D + d]) * C(ye[std::size_t(row) * D + d]);
    g[choice[r * K + j]] += dot;
  }
  softmax_backward_row(E, probs + r * E, g);
}

}  // namespace strata::math::moe
