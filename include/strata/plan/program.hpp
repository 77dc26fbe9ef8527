#pragma once
// A pipeline stage's program: the instructions (compute, messages, the gradient reduction
// and the update) each stage runs in order, and their capacity. Built by the schedules
// (plan/schedule.hpp), proven by the simulator (plan/simulate.hpp).
#include <array>
#include <cstddef>
#include <string_view>

namespace strata::sched {

enum class op : unsigned char {
  forward,         // forward of (micro-batch, chunk)
  backward,        // backward of (micro-batch, chunk); with a zero-bubble schedule, its input gradient only (B)
  weight,          // zero-bubble schedules: the weight gradients of (micro-batch, chunk) (W)
  send_act,        // activation to the next stage
  recv_act,        // activation from the previous stage
  send_grad,       // input gradient to the previous stage
  recv_grad,       // output gradient from the next stage
  reduce_grads,    // data-parallel gradient reduction
  optimizer_step
};

constexpr std::string_view to_string(op o) {
  switch (o) {
    case op::forward: return "F";
    case op::backward: return "B";
    case op::weight: return "W";
    case op::send_act: return "send-act";
    case op::recv_act: return "recv-act";
    case op::send_grad: return "send-grad";
    case op::recv_grad: return "recv-grad";
    case op::reduce_grads: return "reduce-grads";
    case op::optimizer_step: return "optimizer-step";
  }
  return "?";
}

constexpr bool is_compute(op o) { return o == op::forward || o == op::backward || o == op::weight; }
constexpr bool is_p2p(op o) {
  return o == op::send_act || o == op::recv_act || o == op::send_grad || o == op::recv_grad;
}
constexpr bool is_send(op o) { return o == op::send_act || o == op::send_grad; }

struct instr {
  op kind = op::forward;
  int mb = 0;
  int chunk = 0;
  int peer = -1;            // pipeline stage on the other side of a send/recv
  bool group_next = false;  // posted together with the next instruction (one NCCL group)
  bool overlap = false;     // last of a group: the W's right after it run while it is in flight
  // Filled by the lowering (assign_slots): which buffer slots the instruction uses.
  int slot = -1;      // F/B/W: the micro-batch's stash slot; send/recv: the message's slot
  int in_slot = -1;   // B/W: the slot holding the output's gradient
  int out_slot = -1;  // F: where the output goes; B: where the input gradient goes
  bool last = false;  // B (W when split): the part's final backward of the step (gradient buckets go out)
};

// Where pipeline parts run on `stages` stages: chunk c of stage s is part c·stages + s
// (interleaved), or with the V placement (ZB-V, two chunks) part s and part
// 2·stages − 1 − s. A part's chunk is part / stages either way.
constexpr int placed_part(int stages, bool v_shape, int s, int chunk) {
  return v_shape && chunk == 1 ? 2 * stages - 1 - s : chunk * stages + s;
}
constexpr int placed_stage(int stages, bool v_shape, int part) {
  return v_shape && part >= stages ? 2 * stages - 1 - part : part % stages;
}

// Per stage: F and B (and W) of every (micro-batch, chunk), at most four messages each,
// the reduction and the update.
constexpr int schedule_capacity(int m, int v, bool split = false) { return (split ? 7 : 6) * m * v + 4; }

template <int P, int Cap>
struct program {
  static constexpr int stages = P;
  static constexpr int capacity = Cap;
  std::array<std::array<instr, static_cast<std::size_t>(Cap)>, static_cast<std::size_t>(P)> code{};
  std::array<int, static_cast<std::size_t>(P)> length{};
  int micro_batches = 0;
  int chunks = 1;
  // Zero-bubble schedules split each backward: B computes the input gradient, a later W
  // the weight gradients; the micro-batch's stash lives until its W.
  bool split_backward = false;
  bool v_shape = false;  // the V placement (placed_part)

  constexpr int part_of(int s, int chunk) const { return placed_part(P, v_shape, s, chunk); }
  constexpr int stage_of(int part) const { return placed_stage(P, v_shape, part); }

  constexpr const instr& at(int s, int i) const {
    return code[static_cast<std::size_t>(s)][static_cast<std::size_t>(i)];
  }
  constexpr void push(int s, instr x) {
    code[static_cast<std::size_t>(s)][static_cast<std::size_t>(length[static_cast<std::size_t>(s)]++)] = x;
  }
};

}  // namespace strata::sched
