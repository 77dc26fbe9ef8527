#pragma once
// Pipeline schedules as static per-stage instruction lists (plan/program.hpp): GPipe,
// 1F1B, interleaved 1F1B, ZB-H1 and forward-only, and the buffer slots each instruction
// uses. plan/simulate.hpp proves them.
#include <array>
#include <cstddef>

#include "strata/plan/program.hpp"
#include "strata/plan/simulate.hpp"
#include "strata/strategy/options.hpp"

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

// GPipe (EPL PreferForward): all forwards, then all backwards.
template <int P, int M>
constexpr program<P, schedule_capacity(M, 1)> gpipe() {
  program<P, schedule_capacity(M, 1)> prog{};
  prog.micro_batches = M;
  for (int s = 0; s < P; ++s) {
    std::array<detail::work, static_cast<std::size_t>(2 * M)> order{};
    for (int i = 0; i < M; ++i) {
      order[static_cast<std::size_t>(i)] = {true, i, 0, false};
      order[static_cast<std::size_t>(M + i)] = {false, i, 0, false};
    }
    detail::emit_stage(prog, s, order, 2 * M);
  }
  return prog;
}

// 1F1B (EPL PreferBackward): stage s warms up with p−s−1 forwards, then alternates.
template <int P, int M>
constexpr program<P, schedule_capacity(M, 1)> one_f_one_b() {
  program<P, schedule_capacity(M, 1)> prog{};
  prog.micro_batches = M;
  for (int s = 0; s < P; ++s) {
    std::array<detail::work, static_cast<std::size_t>(2 * M)> order{};
    const int warm = (P - s - 1) < M ? (P - s - 1) : M;
    int k = 0;
    for (int i = 0; i < warm; ++i) order[static_cast<std::size_t>(k++)] = {true, i, 0, false};
    for (int i = 0; i < M - warm; ++i) {
      order[static_cast<std::size_t>(k++)] = {true, warm + i, 0, false};
      order[static_cast<std::size_t>(k++)] = {false, i, 0, false};
    }
    for (int i = M - warm; i < M; ++i) order[static_cast<std::size_t>(k++)] = {false, i, 0, false};
    detail::emit_stage(prog, s, order, k);
  }
  return prog;
}

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
struct v_orders {
  std::array<std::array<work, static_cast<std::size_t>(6 * M)>, static_cast<std::size_t>(P)> order{};
  std::array<std::array<long long, static_cast<std::size_t>(6 * M)>, static_cast<std::size_t>(P)> start{};
  std::array<int, static_cast<std::size_t>(P)> count{};
  // when the F and the B of (part, micro-batch) end
  std::array<std::array<long long, static_cast<std::size_t>(M)>, static_cast<std::size_t>(2 * P)> f_end{}, b_end{};
};
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
  auto ready = [](long long end, long long t) { return end >= 0 && end <= t; };
  for (long long t = 0; done < total && t <= 12LL * (M + P) * parts; ++t) {
    for (int s = 0; s < P; ++s) {
      if (free_at[I(s)] > t) continue;
      const int mine[2] = {2 * P - 1 - s, s};  // later part first
      int kind = -1, part = -1, mb = M;
      for (int k : mine) {  // B: lowest micro-batch, later part on ties
        const int m = next_b[I(k)];
        if (m < M && ready(f_end[I(k)][I(m)], t) && (k == parts - 1 || ready(b_end[I(k + 1)][I(m)], t)) && m < mb)
          kind = 1, part = k, mb = m;
      }
      if (kind < 0 && live[I(s)] < cap)
        for (int k : mine) {  // F: later part first
          const int m = next_f[I(k)];
          if (m < M && (k == 0 || ready(f_end[I(k - 1)][I(m)], t))) {
            kind = 0, part = k, mb = m;
            break;
          }
        }
      if (kind < 0) {  // W: the one whose B finished first
        long long oldest = -1;
        for (int k : {s, 2 * P - 1 - s}) {
          const int m = next_w[I(k)];
          if (m < M && ready(b_end[I(k)][I(m)], t) && (oldest < 0 || b_end[I(k)][I(m)] < oldest))
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
  program<P, schedule_capacity(M, 2, true)> prog{};
  prog.micro_batches = M;
  prog.chunks = 2;
  prog.split_backward = true;
  prog.v_shape = true;
  constexpr detail::v_orders<P, M> v = detail::zb_v_orders<P, M>();
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
      const detail::work& w = v.order[I(s)][I(k)];
      at[I(k)] = -1;
      if (!detail::message_of(prog, s, w, false, recv[I(k)])) continue;
      const int from = prog.part_of(s, w.chunk) + (w.fwd ? -1 : 1);
      sent[I(k)] = w.fwd ? v.f_end[I(from)][I(w.mb)] : v.b_end[I(from)][I(w.mb)];
      at[I(k)] = boundary_of(sent[I(k)]);
    }
    for (int j = 0, next = 0; j <= n; ++j) {
      const int first = prog.length[I(s)];
      if (instr x{}; j > 0 && detail::message_of(prog, s, v.order[I(s)][I(j - 1)], true, x))
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
        const detail::work& w = v.order[I(s)][I(j)];
        prog.push(s, instr{w.weight ? op::weight : w.fwd ? op::forward : op::backward, w.mb, w.chunk, -1, false});
      }
    }
    prog.push(s, instr{op::reduce_grads, 0, 0, -1, false});
    prog.push(s, instr{op::optimizer_step, 0, 0, -1, false});
  }
  return prog;
}

// Interleaved 1F1B with V chunks per stage (Megatron / Colossal-AI): chunk c of stage s
// is pipeline part c·p + s; micro-batches advance through chunks in groups of p.
template <int P, int M, int V>
constexpr program<P, schedule_capacity(M, V)> interleaved() {
  if constexpr (V == 1) {
    return one_f_one_b<P, M>();  // one chunk: interleaving degenerates to plain 1F1B
  } else {
  program<P, schedule_capacity(M, V)> prog{};
  prog.micro_batches = M;
  prog.chunks = V;
  const int total = M * V;
  for (int s = 0; s < P; ++s) {
    std::array<detail::work, static_cast<std::size_t>(2 * M * V)> order{};
    auto fwd_of = [&](int k) { return detail::work{true, (k / (P * V)) * P + k % P, (k / P) % V, false}; };
    auto bwd_of = [&](int k) { return detail::work{false, (k / (P * V)) * P + k % P, V - 1 - (k / P) % V, false}; };
    int warm = (M == P) ? total : (P - s - 1) * 2 + (V - 1) * P;
    if (warm > total) warm = total;
    int n = 0;
    for (int k = 0; k < warm; ++k) order[static_cast<std::size_t>(n++)] = fwd_of(k);
    for (int j = 0; j < total - warm; ++j) {
      detail::work f = fwd_of(warm + j);
      f.fused_with_next = true;  // Megatron posts one group after each forward/backward pair
      order[static_cast<std::size_t>(n++)] = f;
      order[static_cast<std::size_t>(n++)] = bwd_of(j);
    }
    for (int j = total - warm; j < total; ++j) order[static_cast<std::size_t>(n++)] = bwd_of(j);
    detail::emit_stage(prog, s, order, n);
  }
  return prog;
  }
}

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

// ---- buffer slots ------------------------------------------------------------------------
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
