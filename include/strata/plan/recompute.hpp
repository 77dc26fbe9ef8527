#pragma once
// Activation recomputation regions (GradientCheckpoint): which layers' activations are
// dropped after the forward and computed again before their backward, one region at a
// time. The lowering (lower.hpp) turns the regions into recompute steps and a shared
// recompute buffer.
#include <array>
#include <cstddef>

#include "strata/layers/residual.hpp"
#include "strata/plan/sharding.hpp"
#include "strata/strategy/options.hpp"

namespace strata::detail {

template <std::size_t N>
struct recompute_plan {
  std::array<int, N + 1> region{};  // per layer, −1: its activations are kept (one past the end: −1)
  int regions = 0;
};

// Regions by mode, from the items' marks (layers/residual.hpp) for collection and
// automatic, from the TaskGraphs for end_taskgraph. A region never crosses a TaskGraph or
// part, and ends before a part's last layer (whose output is a message) and before the
// loss (whose forward accumulates the step's loss).
template <std::size_t N, std::size_t M>
constexpr recompute_plan<N> plan_recompute(const std::array<layer_plan, N>& lp, checkpoint_mode mode,
                                           const std::array<unsigned char, M>& user,
                                           const std::array<unsigned char, M>& block) {
  recompute_plan<N> r;
  int prev_tg = -1;
  bool open = false;
  for (std::size_t i = 0; i < N; ++i) {
    const layer_plan& L = lp[i];
    unsigned char m = mark_none;
    if (i < M) {
      if (mode == checkpoint_mode::collection) m = user[i];
      else if (mode == checkpoint_mode::automatic) m = block[i];
      else m = L.taskgraph != prev_tg ? mark_start : mark_inside;
    }
    const bool part_last = i + 1 >= N || lp[i + 1].part != L.part;
    if (m == mark_none || part_last || L.desc.role == layer_role::loss) {
      r.region[i] = -1, open = false;
    } else {
      if (m == mark_start || !open || L.taskgraph != prev_tg) ++r.regions, open = true;
      r.region[i] = r.regions - 1;
    }
    prev_tg = L.taskgraph;
  }
  r.region[N] = -1;
  return r;
}

}  // namespace strata::detail
