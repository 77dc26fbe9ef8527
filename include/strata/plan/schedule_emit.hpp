#pragma once
// How a schedule's builder turns each stage's order of computes into its program
// (plan/program.hpp): the messages between them, posted in groups, and the closing
// reduction and update. The built-in schedules (plan/schedules/) and user schedules build
// on it; so does the forward-only program of evaluation.
#include <array>
#include <cstddef>

#include "strata/plan/program.hpp"

namespace strata::sched {

namespace detail {

struct work {
  bool fwd = true;
  int mb = 0, chunk = 0;
  bool fused_with_next = false;  // no communication between this op and the next
  bool weight = false;           // a W (zero-bubble): no messages of its own
};

// Turns a compute order into a program. Communication happens at boundaries between
// compute ops; one boundary posts, as one group, the sends of every op since the last
// boundary and the receives of every op up to the next one (Megatron's
// send_forward_recv_backward / batched isend-irecv), which is what lets 1F1B and the
// interleaved schedule make progress under rendezvous send/recv.
// The message compute `w` on stage s sends (its output, or its input's gradient) or
// receives (its input, or its output's gradient), if any: none for a W, at the model's
// ends, or when the neighbouring part runs on s too (one stage, or the turn of a V: a
// hand-over in place).
template <int P, int Cap>
constexpr bool message_of(const program<P, Cap>& prog, int s, const work& w, bool send, instr& x) {
  if (w.weight) return false;
  const int other = prog.part_of(s, w.chunk) + (w.fwd == send ? 1 : -1);
  if (other < 0 || other >= P * prog.chunks || prog.stage_of(other) == s) return false;
  const op kind = send ? (w.fwd ? op::send_act : op::send_grad) : (w.fwd ? op::recv_act : op::recv_grad);
  x = instr{kind, w.mb, w.chunk, prog.stage_of(other), false};
  return true;
}

template <int P, int Cap, std::size_t W>
constexpr void emit_stage(program<P, Cap>& prog, int s, const std::array<work, W>& order, int count,
                          bool training = true) {
  auto recv_of = [&](const work& w, instr& x) { return message_of(prog, s, w, false, x); };
  auto send_of = [&](const work& w, instr& x) { return message_of(prog, s, w, true, x); };
  int i = 0, last_boundary_end = 0;  // computes [last_boundary_end, i) have their sends pending
  auto boundary = [&](int from_send, int to_send, int from_recv, int to_recv) {
    const int start = prog.length[static_cast<std::size_t>(s)];
    instr x{};
    for (int k = from_send; k < to_send; ++k)
      if (send_of(order[static_cast<std::size_t>(k)], x)) prog.push(s, x);
    for (int k = from_recv; k < to_recv; ++k)
      if (recv_of(order[static_cast<std::size_t>(k)], x)) prog.push(s, x);
    const int end = prog.length[static_cast<std::size_t>(s)];
    for (int k = start; k + 1 < end; ++k) prog.code[static_cast<std::size_t>(s)][static_cast<std::size_t>(k)].group_next = true;
    // W's need nothing received: they run while the messages are in flight
    if (end > start && from_recv < count && order[static_cast<std::size_t>(from_recv)].weight)
      prog.code[static_cast<std::size_t>(s)][static_cast<std::size_t>(end - 1)].overlap = true;
  };
  auto segment_end = [&](int from) {  // computes [from, e) run without communication
    int e = from;
    while (e < count && order[static_cast<std::size_t>(e)].fused_with_next) ++e;
    return e < count ? e + 1 : count;
  };
  int seg_end = segment_end(0);
  boundary(0, 0, 0, seg_end);
  while (i < count) {
    for (; i < seg_end; ++i) {
      const work& w = order[static_cast<std::size_t>(i)];
      prog.push(s, instr{w.weight ? op::weight : w.fwd ? op::forward : op::backward, w.mb, w.chunk, -1, false});
    }
    const int next_end = i < count ? segment_end(i) : count;
    boundary(last_boundary_end, i, i, next_end);
    last_boundary_end = i;
    seg_end = next_end;
  }
  if (!training) return;
  prog.push(s, instr{op::reduce_grads, 0, 0, -1, false});
  prog.push(s, instr{op::optimizer_step, 0, 0, -1, false});
}

}  // namespace detail

// Forward only, one micro-batch (evaluation): each stage runs its chunks in order,
// receiving from the previous part and sending to the next.
template <int P, int V, bool VShape = false>
constexpr program<P, schedule_capacity(1, V)> forward_only() {
  program<P, schedule_capacity(1, V)> prog{};
  prog.micro_batches = 1;
  prog.chunks = V;
  prog.v_shape = VShape;  // the training schedule's placement
  for (int s = 0; s < P; ++s) {
    std::array<detail::work, static_cast<std::size_t>(V)> order{};
    for (int c = 0; c < V; ++c) order[static_cast<std::size_t>(c)] = {true, 0, c, false};
    detail::emit_stage(prog, s, order, V, /*training=*/false);
  }
  return prog;
}

}  // namespace strata::sched
