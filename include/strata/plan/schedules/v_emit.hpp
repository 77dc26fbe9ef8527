#pragma once
// The two V schedules' common half (plan/schedules/zb_v.hpp, dual_pipe_v.hpp): each
// stage's order of F, B and W with the unit-time start of every op, and the program made
// from it — each message posted at the boundary where the timed order says it arrives.
#include <array>
#include <cstddef>

#include "strata/plan/schedule_emit.hpp"

namespace strata::sched::detail {

// Stage s's ops in order, their start times (one unit per F, B and W of a part), and when
// each (part, micro-batch)'s F and B end.
template <int P, int M>
struct v_orders {
  std::array<std::array<work, static_cast<std::size_t>(6 * M)>, static_cast<std::size_t>(P)> order{};
  std::array<std::array<long long, static_cast<std::size_t>(6 * M)>, static_cast<std::size_t>(P)> start{};
  std::array<int, static_cast<std::size_t>(P)> count{};
  // when the F and the B of (part, micro-batch) end
  std::array<std::array<long long, static_cast<std::size_t>(M)>, static_cast<std::size_t>(2 * P)> f_end{}, b_end{};
};

// Whether the inputs of (part, micro-batch)'s F, B or W are there at time t: the previous
// part's F, the part's own F and the next part's B, the part's B (−1: not yet scheduled).
template <int P, int M>
constexpr bool inputs_ready(const v_orders<P, M>& v, const work& w, int part, long long t) {
  constexpr auto I = [](long long i) { return static_cast<std::size_t>(i); };
  auto done = [t](long long end) { return end >= 0 && end <= t; };
  if (w.weight) return done(v.b_end[I(part)][I(w.mb)]);
  if (w.fwd) return part == 0 || done(v.f_end[I(part - 1)][I(w.mb)]);
  return done(v.f_end[I(part)][I(w.mb)]) && (part == 2 * P - 1 || done(v.b_end[I(part + 1)][I(w.mb)]));
}

template <int P, int M>
constexpr program<P, schedule_capacity(M, 2, true)> emit_v(const v_orders<P, M>& v) {
  program<P, schedule_capacity(M, 2, true)> prog{};
  prog.micro_batches = M;
  prog.chunks = 2;
  prog.split_backward = true;
  prog.v_shape = true;
  constexpr auto I = [](long long i) { return static_cast<std::size_t>(i); };
  // Messages go where the timed order puts them: a stage posts, after each compute, the
  // send of what it produced and the receive of every message whose send falls between
  // the end of that compute and the start of its next one (or during the next one). Then
  // every group's partners are posted while it is open, and the receives from a peer come
  // in the order the peer sends, as NCCL requires — activations and gradients cross each
  // link both ways in a V.
  for (int s = 0; s < P; ++s) {
    const int n = v.count[I(s)];
    auto start_of = [&](int j) { return j < n ? v.start[I(s)][I(j)] : 0x7fffffffLL; };
    // boundary j sits between ops j − 1 and j: posted when op j − 1 ends, open until op j
    // starts; with unit ops the windows tile time, and a message sent at t belongs to the
    // boundary after every op started before t
    auto boundary_of = [&](long long sent) {
      int j = 0;
      while (j < n && start_of(j) < sent) ++j;
      return j;
    };
    // each op's incoming message, when it is sent and the boundary that receives it
    std::array<instr, I(6 * M)> recv{};
    std::array<long long, I(6 * M)> sent{};
    std::array<int, I(6 * M)> at{};
    for (int k = 0; k < n; ++k) {
      const work& w = v.order[I(s)][I(k)];
      at[I(k)] = -1;
      if (!message_of(prog, s, w, false, recv[I(k)])) continue;
      const int from = prog.part_of(s, w.chunk) + (w.fwd ? -1 : 1);
      sent[I(k)] = w.fwd ? v.f_end[I(from)][I(w.mb)] : v.b_end[I(from)][I(w.mb)];
      at[I(k)] = boundary_of(sent[I(k)]);
    }
    for (int j = 0, next = 0; j <= n; ++j) {
      const int first = prog.length[I(s)];
      if (instr x{}; j > 0 && message_of(prog, s, v.order[I(s)][I(j - 1)], true, x))
        prog.push(s, x);  // the send of op j − 1
      // the receives this boundary takes, earliest sent first (ops at or after j only)
      for (;;) {
        int pick = -1;
        for (int k = next; k < n; ++k)
          if (at[I(k)] == j && (pick < 0 || sent[I(k)] < sent[I(pick)])) pick = k;
        if (pick < 0) break;
        prog.push(s, recv[I(pick)]);
        at[I(pick)] = -1;
      }
      while (next < n && at[I(next)] < 0) ++next;
      const int last = prog.length[I(s)];
      for (int i = first; i + 1 < last; ++i) prog.code[I(s)][I(i)].group_next = true;
      if (last > first && j < n && v.order[I(s)][I(j)].weight) prog.code[I(s)][I(last - 1)].overlap = true;
      if (j < n) {
        const work& w = v.order[I(s)][I(j)];
        prog.push(s, instr{w.weight ? op::weight : w.fwd ? op::forward : op::backward, w.mb, w.chunk, -1, false});
      }
    }
    prog.push(s, instr{op::reduce_grads, 0, 0, -1, false});
    prog.push(s, instr{op::optimizer_step, 0, 0, -1, false});
  }
  return prog;
}

}  // namespace strata::sched::detail
