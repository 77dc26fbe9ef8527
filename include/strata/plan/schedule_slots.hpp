#pragma once
// The buffer slots each instruction of a schedule's program uses (the lowering's first step).
#include <array>
#include <cstddef>

#include "strata/plan/program.hpp"

namespace strata::sched {

// Each pipeline part keeps per-micro-batch buffers in four pools: act (its input and
// what its layers stash, from the activation's arrival to the backward), exit (its
// output until sent), gout (its output's gradient, from arrival to the backward) and
// gin (its input's gradient until sent). Walking a stage's program in order, each use
// takes the lowest free slot of its pool and the last use frees it; the counts are
// the buffers the stage allocates. Consecutive parts on one stage (a single stage, or
// the turn of a V) hand over in place: a part's output goes straight into the next
// part's act slot, a gradient into the previous part's gout slot.
enum class pool_kind : unsigned char { act, exit, gout, gin };
inline constexpr int num_pools = 4;

template <int P, int Cap, int Parts>
struct slotted {
  program<P, Cap> prog{};
  std::array<std::array<int, static_cast<std::size_t>(Parts)>, num_pools> slots{};  // per pool, per part
  constexpr int count(pool_kind k, int part) const {
    return slots[static_cast<std::size_t>(k)][static_cast<std::size_t>(part)];
  }
};

template <int Parts, int M, int P, int Cap>
constexpr slotted<P, Cap, Parts> assign_slots(const program<P, Cap>& in) {
  slotted<P, Cap, Parts> r{};
  r.prog = in;
  constexpr std::size_t NP = static_cast<std::size_t>(Parts), NM = static_cast<std::size_t>(M);
  for (int s = 0; s < P; ++s) {
    std::array<std::array<int, NP * NM>, num_pools> held{};  // slot of (part, mb), −1 none
    std::array<std::array<bool, NP * NM>, num_pools> used{};  // (part, slot) taken
    for (auto& h : held)
      for (int& x : h) x = -1;
    auto key = [](int part, int mb) { return static_cast<std::size_t>(part) * NM + static_cast<std::size_t>(mb); };
    auto alloc = [&](pool_kind k, int part, int mb) {
      auto& h = held[static_cast<std::size_t>(k)][key(part, mb)];
      if (h >= 0) return h;
      auto& u = used[static_cast<std::size_t>(k)];
      int slot = 0;
      while (slot + 1 < M && u[key(part, slot)]) ++slot;
      u[key(part, slot)] = true;
      h = slot;
      int& c = r.slots[static_cast<std::size_t>(k)][static_cast<std::size_t>(part)];
      if (slot + 1 > c) c = slot + 1;
      return slot;
    };
    auto find = [&](pool_kind k, int part, int mb) { return held[static_cast<std::size_t>(k)][key(part, mb)]; };
    auto release = [&](pool_kind k, int part, int mb) {
      auto& h = held[static_cast<std::size_t>(k)][key(part, mb)];
      if (h >= 0) used[static_cast<std::size_t>(k)][key(part, h)] = false;
      h = -1;
    };
    std::array<int, NP> last_backward{};
    for (int& x : last_backward) x = -1;
    for (int i = 0; i < r.prog.length[static_cast<std::size_t>(s)]; ++i) {
      instr& x = r.prog.code[static_cast<std::size_t>(s)][static_cast<std::size_t>(i)];
      const int part = r.prog.part_of(s, x.chunk);
      if (part < 0 || part >= Parts || x.mb < 0 || x.mb >= M) continue;  // reported by check_complete
      const bool same_stage_next = part + 1 < Parts && r.prog.stage_of(part + 1) == s;
      const bool same_stage_prev = part > 0 && r.prog.stage_of(part - 1) == s;
      switch (x.kind) {
        case op::recv_act: x.slot = alloc(pool_kind::act, part, x.mb); break;
        case op::forward:
          x.slot = alloc(pool_kind::act, part, x.mb);
          if (part + 1 < Parts)
            x.out_slot = same_stage_next ? alloc(pool_kind::act, part + 1, x.mb) : alloc(pool_kind::exit, part, x.mb);
          break;
        case op::send_act:
          x.slot = find(pool_kind::exit, part, x.mb);
          release(pool_kind::exit, part, x.mb);
          break;
        case op::recv_grad: x.slot = alloc(pool_kind::gout, part, x.mb); break;
        case op::backward:
        case op::weight:
          x.slot = find(pool_kind::act, part, x.mb);
          x.in_slot = find(pool_kind::gout, part, x.mb);
          if (x.kind == op::backward && part > 0)
            x.out_slot = same_stage_prev ? alloc(pool_kind::gout, part - 1, x.mb) : alloc(pool_kind::gin, part, x.mb);
          // the stash and the output's gradient go with their last reader: W when split
          if (x.kind == (r.prog.split_backward ? op::weight : op::backward)) {
            release(pool_kind::act, part, x.mb);
            release(pool_kind::gout, part, x.mb);
            last_backward[static_cast<std::size_t>(part)] = i;
          }
          break;
        case op::send_grad:
          x.slot = find(pool_kind::gin, part, x.mb);
          release(pool_kind::gin, part, x.mb);
          break;
        default: break;
      }
    }
    for (int part = 0; part < Parts; ++part)
      if (const int i = last_backward[static_cast<std::size_t>(part)]; i >= 0)
        r.prog.code[static_cast<std::size_t>(s)][static_cast<std::size_t>(i)].last = true;
  }
  return r;
}

}  // namespace strata::sched
