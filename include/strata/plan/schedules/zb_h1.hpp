#pragma once
// ZB-H1 (zero-bubble pipeline, Qi et al. 2023): its builder and its tag,
// Schedule<ZeroBubbleH1>.
#include <array>
#include <cstddef>
#include <string_view>

#include "strata/plan/schedule_emit.hpp"

namespace strata::sched {

// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", 2023): 1F1B's order of forwards
// and input-gradient backwards (B), with each weight-gradient pass (W) deferred: stage s
// runs W of micro-batch k right after B of micro-batch k + s and the last s + 1 W's at
// the end. The deferred W's fill the cool-down, where 1F1B idles; a stage holds at most
// p micro-batches (1F1B's first stage), and with unit costs F, B, W (W ≤ F, W ≤ B) the
// step takes M·(F + B + W) + (p − 1)·(F + B − W) instead of 1F1B's (M + p − 1)·(F + B + W).
// A W has no messages of its own: it runs inside the segment before the next forward, so
// the groups a stage posts are 1F1B's.
template <int P, int M>
constexpr program<P, schedule_capacity(M, 1, true)> zb_h1() {
  program<P, schedule_capacity(M, 1, true)> prog{};
  prog.micro_batches = M;
  prog.split_backward = true;
  for (int s = 0; s < P; ++s) {
    std::array<detail::work, static_cast<std::size_t>(3 * M)> order{};
    const int warm = (P - s - 1) < M ? (P - s - 1) : M;
    int k = 0, next_w = 0;
    auto b_then_w = [&](int mb) {
      order[static_cast<std::size_t>(k++)] = {false, mb, 0, false, false};
      if (mb - s >= 0) order[static_cast<std::size_t>(k++)] = {false, next_w++, 0, true, true};
    };
    for (int i = 0; i < warm; ++i) order[static_cast<std::size_t>(k++)] = {true, i, 0, false, false};
    for (int i = 0; i < M - warm; ++i) {
      order[static_cast<std::size_t>(k++)] = {true, warm + i, 0, false, false};
      b_then_w(i);
    }
    for (int i = M - warm; i < M; ++i) b_then_w(i);
    while (next_w < M) order[static_cast<std::size_t>(k++)] = {false, next_w++, 0, true, true};
    detail::emit_stage(prog, s, order, k);
  }
  return prog;
}

}  // namespace strata::sched

namespace strata {

// Every backward split into its input gradient (B, on the critical path) and its weight
// gradients (W, deferred into 1F1B's cool-down bubble); 1F1B's peak activation memory
// (p micro-batches) on every stage.
struct ZeroBubbleH1 {
  static constexpr std::string_view name = "ZB-H1 (ZeroBubbleH1)", label = "ZB-H1";
  static constexpr bool split_backward = true;
  template <int Stages, int M, int Chunks>
  static constexpr auto build() {
    return sched::zb_h1<Stages, M>();
  }
  // W's deferred: every stage holds up to p, and past the first the activation whose
  // receive is posted before the W's it overlaps
  static constexpr long long in_flight(int p, int m, int s) { return m < p + (s > 0) ? m : p + (s > 0); }
  // the W's fill the cool-down: (p − 1)(F + B − W)
  static constexpr double bubble(int p, double stage_s, double weight_s) { return (p - 1) * (stage_s - 2 * weight_s); }
};

}  // namespace strata
