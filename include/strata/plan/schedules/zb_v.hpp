#pragma once
// ZB-V (Qi et al. 2024): its builder and its tag, Schedule<ZeroBubbleV>.
#include <array>
#include <cstddef>
#include <string_view>

#include "strata/core/diagnosis.hpp"
#include "strata/plan/schedule_emit.hpp"
#include "strata/plan/schedules/v_emit.hpp"

namespace strata::sched {

// ZB-V (Qi et al., "Pipeline Parallelism with Controllable Memory", 2024): two chunks per
// stage in a V — stage s runs part s (chunk 0) and part 2P − 1 − s (chunk 1), so a
// micro-batch goes down the stages and back up, and the loss is on stage 0 — every
// backward split into B and W. The order comes from list scheduling with one time unit
// per F, B and W of a chunk: whenever a stage is free it runs a ready B (lowest
// micro-batch, later part first: the critical path), else a ready F (later part first,
// which finishes micro-batches) while it holds fewer than 2P chunk-activations (1F1B's
// peak on its first stage: P micro-batches of two chunks each), else the oldest ready W.
// The last stage can start only after P − 1 chunk forwards, so no order beats
// 6M + P − 1 units; this one reaches it for P ≤ 4 and every M ≥ P, and stays within
// P − 4 units of it for P = 5 to 8 (static tests), against 1F1B's 6M + 6(P − 1).
namespace detail {
template <int P, int M>
constexpr v_orders<P, M> zb_v_orders() {
  constexpr int parts = 2 * P, cap = 2 * P;
  constexpr auto I = [](int i) { return static_cast<std::size_t>(i); };
  v_orders<P, M> r{};
  // finish times of F and B of (part, micro-batch); −1 not yet scheduled
  auto& f_end = r.f_end;
  auto& b_end = r.b_end;
  for (auto& row : f_end)
    for (long long& x : row) x = -1;
  b_end = f_end;
  std::array<int, static_cast<std::size_t>(parts)> next_f{}, next_b{}, next_w{};
  std::array<long long, static_cast<std::size_t>(P)> free_at{};
  std::array<int, static_cast<std::size_t>(P)> live{};
  const int total = 3 * parts * M;
  int done = 0;
  for (long long t = 0; done < total && t <= 12LL * (M + P) * parts; ++t) {
    for (int s = 0; s < P; ++s) {
      if (free_at[I(s)] > t) continue;
      const int mine[2] = {2 * P - 1 - s, s};  // later part first
      int kind = -1, part = -1, mb = M;
      for (int k : mine) {  // B: lowest micro-batch, later part on ties
        const int m = next_b[I(k)];
        if (m < M && inputs_ready(r, work{false, m, 0, false, false}, k, t) && m < mb)
          kind = 1, part = k, mb = m;
      }
      if (kind < 0 && live[I(s)] < cap)
        for (int k : mine) {  // F: later part first
          const int m = next_f[I(k)];
          if (m < M && inputs_ready(r, work{true, m, 0, false, false}, k, t)) {
            kind = 0, part = k, mb = m;
            break;
          }
        }
      if (kind < 0) {  // W: the one whose B finished first
        long long oldest = -1;
        for (int k : {s, 2 * P - 1 - s}) {
          const int m = next_w[I(k)];
          const bool older = oldest < 0 || (m < M && b_end[I(k)][I(m)] < oldest);
          if (m < M && inputs_ready(r, work{false, m, 0, false, true}, k, t) && older)
            kind = 2, part = k, mb = m, oldest = b_end[I(k)][I(m)];
        }
      }
      if (kind < 0) continue;
      const int chunk = part < P ? 0 : 1;
      if (kind == 0) f_end[I(part)][I(mb)] = t + 1, ++next_f[I(part)], ++live[I(s)];
      if (kind == 1) b_end[I(part)][I(mb)] = t + 1, ++next_b[I(part)];
      if (kind == 2) ++next_w[I(part)], --live[I(s)];
      free_at[I(s)] = t + 1;
      r.start[I(s)][I(r.count[I(s)])] = t;
      r.order[I(s)][I(r.count[I(s)]++)] = work{kind == 0, mb, chunk, false, kind == 2};
      ++done;
    }
  }
  return r;
}
}  // namespace detail

template <int P, int M>
constexpr program<P, schedule_capacity(M, 2, true)> zb_v() {
  return detail::emit_v<P, M>(detail::zb_v_orders<P, M>());
}

}  // namespace strata::sched

namespace strata {

// Two chunks per stage placed in a V — stage s runs pipeline parts s and 2p − 1 − s, so
// the first and the last part share stage 0 and the turn from part p − 1 to part p stays
// on stage p − 1 — with backwards split into B and W as ZB-H1 and an order that keeps at
// most 2p chunk-activations (1F1B's memory) per stage. With equal F, B and W per chunk its
// step is M·(F + B + W) + (p − 1)·F/2 for most (p, M): only the last stage's wait for the
// first forward. Not priced by the cost model (nor searched) yet.
struct ZeroBubbleV {
  static constexpr std::string_view name = "ZB-V (ZeroBubbleV)", label = "ZB-V";
  static constexpr int chunks = 2;
  static constexpr bool v_shape = true, split_backward = true;
  template <int Stages, int M, int Chunks>
  static constexpr auto build() {
    return sched::zb_v<Stages, M>();
  }
  // [zero-bubble-v]: stage s runs parts s and 2p − 1 − s of an even number of parts
  static constexpr detail::diagnosis check(int parts, int, int) {
    if (parts < 2 || parts % 2 != 0) return {detail::rule_id::zero_bubble_v_parts, parts};
    return {};
  }
};

}  // namespace strata
