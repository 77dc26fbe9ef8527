#pragma once
// When staged weights (Offload, CastWeightsPerUse) are brought to the device during a
// training step. Layers read their TaskGraph's weights from one of two slots, refilled
// first in, first out when a TaskGraph is in neither. The step's sequence of TaskGraph
// uses is fixed by the lowered program, so each refill can be issued early — right after
// the last use of the TaskGraph it evicts — on a copy queue, and overlap the layers that
// run in between (the compute queue waits for it only at the use that needs it).
#include <array>
#include <cstddef>
#include <vector>

#include "strata/plan/lower.hpp"

namespace strata::exec::staging {

struct schedule {
  std::vector<int> slot;                 // per use: the slot holding its TaskGraph
  std::vector<bool> fills;               // per use: whether its TaskGraph is brought in for it
  std::vector<std::array<int, 2>> issue; // per use: the fills (uses they serve) issued right before it, −1: none
  int num_fills = 0;
};

// The schedule for a sequence of TaskGraph uses, the slots empty at its start. The fills
// are the misses of two first-in-first-out slots, issued as early as the slot allows.
inline schedule plan(const std::vector<int>& uses) {
  const std::size_t n = uses.size();
  schedule s;
  s.slot.assign(n, 0);
  s.fills.assign(n, false);
  s.issue.assign(n, {-1, -1});
  int held[2] = {-1, -1}, next = 0;
  int last_use[2] = {-1, -1};  // the last use of each slot's TaskGraph so far
  for (std::size_t j = 0; j < n; ++j) {
    int k = held[0] == uses[j] ? 0 : held[1] == uses[j] ? 1 : -1;
    if (k < 0) {
      k = next;
      next ^= 1;
      held[k] = uses[j];
      s.fills[j] = true;
      ++s.num_fills;
      auto& at = s.issue[static_cast<std::size_t>(last_use[k] + 1)];
      at[at[0] < 0 ? 0 : 1] = static_cast<int>(j);
    }
    s.slot[j] = k;
    last_use[k] = static_cast<int>(j);
  }
  return s;
}

// The TaskGraphs a device of `stage` uses in one training step, in order: one per layer
// call with parameters (forward, backward, recomputed forward) in the lowered program.
template <class P>
std::vector<int> training_uses(int stage) {
  const auto& T = lower::lowered<P>::tables;
  const auto& prog = lower::lowered<P>::train.prog;
  std::vector<int> uses;
  for (int i = 0; i < prog.length[static_cast<std::size_t>(stage)]; ++i) {
    const sched::instr& x = prog.at(stage, i);
    if (x.kind != sched::op::forward && x.kind != sched::op::backward) continue;
    const lower::part_plan& pp = T.parts[static_cast<std::size_t>(P::part_of(stage, x.chunk))];
    const bool fwd = x.kind == sched::op::forward;
    for (int k = fwd ? pp.fwd_begin : pp.bwd_begin; k < (fwd ? pp.fwd_end : pp.bwd_end); ++k) {
      const lower::step& st = T.steps[static_cast<std::size_t>(k)];
      const bool call = st.kind == lower::step_kind::forward || st.kind == lower::step_kind::backward ||
                        st.kind == lower::step_kind::recompute;
      const layer_plan& lp = P::layer_plans[static_cast<std::size_t>(st.index)];
      if (call && lp.desc.num_params > 0) uses.push_back(lp.taskgraph);
    }
  }
  return uses;
}

}  // namespace strata::exec::staging
