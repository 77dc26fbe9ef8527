#pragma once
// Pipeline schedules as static per-stage instruction lists, and the simulator that
// proves their sends and receives pair up (deadlock freedom) and measures the bubble.
#include <array>
#include <string_view>
#include <type_traits>

#include "strata/strategy/options.hpp"

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

  constexpr const instr& at(int s, int i) const {
    return code[static_cast<std::size_t>(s)][static_cast<std::size_t>(i)];
  }
  constexpr void push(int s, instr x) {
    code[static_cast<std::size_t>(s)][static_cast<std::size_t>(length[static_cast<std::size_t>(s)]++)] = x;
  }
};

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
template <int P, int Cap, std::size_t W>
constexpr void emit_stage(program<P, Cap>& prog, int s, const std::array<work, W>& order, int count,
                          bool training = true) {
  const int p = P, v = prog.chunks;
  const int last_virtual = p * v - 1;
  const int prev = (s - 1 + p) % p, next = (s + 1) % p;
  auto recv_of = [&](const work& w, instr& x) {
    if (w.weight) return false;
    const int virt = w.chunk * p + s;
    if (w.fwd && virt > 0 && prev != s) { x = instr{op::recv_act, w.mb, w.chunk, prev, false}; return true; }
    if (!w.fwd && virt < last_virtual && next != s) { x = instr{op::recv_grad, w.mb, w.chunk, next, false}; return true; }
    return false;
  };
  auto send_of = [&](const work& w, instr& x) {
    if (w.weight) return false;
    const int virt = w.chunk * p + s;
    if (w.fwd && virt < last_virtual && next != s) { x = instr{op::send_act, w.mb, w.chunk, next, false}; return true; }
    if (!w.fwd && virt > 0 && prev != s) { x = instr{op::send_grad, w.mb, w.chunk, prev, false}; return true; }
    return false;
  };
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
template <int P, int V>
constexpr program<P, schedule_capacity(1, V)> forward_only() {
  program<P, schedule_capacity(1, V)> prog{};
  prog.micro_batches = 1;
  prog.chunks = V;
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
// the buffers the stage allocates. With one stage, consecutive parts hand over in
// place: a part's output goes straight into the next part's act slot, a gradient
// into the previous part's gout slot.
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
      const int part = x.chunk * P + s;
      if (part < 0 || part >= Parts || x.mb < 0 || x.mb >= M) continue;  // reported by check_complete
      const bool same_stage_next = P == 1 && part + 1 < Parts, same_stage_prev = P == 1 && part > 0;
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

// ---- checking and simulation -----------------------------------------------------------

enum class verdict : unsigned char { ok, deadlock, mismatch, incomplete };

struct sim_result {
  verdict status = verdict::ok;
  int stage = -1;        // where it went wrong
  int instruction = -1;
  long long makespan = 0;  // time units; forward = fwd_cost, backward = bwd_cost per chunk
  long long busy = 0;      // compute time of one stage
};

// Rendezvous semantics: a send completes only when the peer has posted the matching
// receive (the strictest reading of NCCL send/recv), operations in one group are posted
// together, and operations between a pair of stages match in posting order — NCCL has
// no tags, so a receive paired with the wrong micro-batch is reported as a mismatch.
// Start and end time of every instruction, for the timeline report.
template <int P, int Cap>
struct timeline {
  std::array<std::array<long long, static_cast<std::size_t>(Cap)>, static_cast<std::size_t>(P)> start{}, end{};
};

// What a forward, a backward (B alone when the program splits backwards) and a W of one
// (micro-batch, chunk) take on each stage: equal costs, or measured ones (an unbalanced
// pipeline).
template <int P>
struct stage_costs {
  std::array<long long, static_cast<std::size_t>(P)> fwd{}, bwd{}, wgt{};
  static constexpr stage_costs uniform(long long f, long long b, long long w) {
    stage_costs c;
    for (int s = 0; s < P; ++s)
      c.fwd[static_cast<std::size_t>(s)] = f, c.bwd[static_cast<std::size_t>(s)] = b, c.wgt[static_cast<std::size_t>(s)] = w;
    return c;
  }
};

template <int P, int Cap>
constexpr sim_result simulate_costs(const program<P, Cap>& prog, const stage_costs<P>& costs,
                                    std::type_identity_t<timeline<P, Cap>>* times = nullptr);

// Costs: a forward, a backward (B alone when the program splits backwards) and a W.
template <int P, int Cap>
constexpr sim_result simulate(const program<P, Cap>& prog, long long fwd_cost = 1, long long bwd_cost = 2,
                              std::type_identity_t<timeline<P, Cap>>* times = nullptr, long long wgt_cost = 0) {
  return simulate_costs(prog, stage_costs<P>::uniform(fwd_cost, bwd_cost, wgt_cost), times);
}

template <int P, int Cap>
constexpr sim_result simulate_costs(const program<P, Cap>& prog, const stage_costs<P>& costs,
                                    std::type_identity_t<timeline<P, Cap>>* times) {
  sim_result r{};
  std::array<int, static_cast<std::size_t>(P)> pc{};
  std::array<long long, static_cast<std::size_t>(P)> clock{}, posted{}, done_at{};
  std::array<bool, static_cast<std::size_t>(P)> in_group{};
  std::array<std::array<bool, static_cast<std::size_t>(Cap)>, static_cast<std::size_t>(P)> done{};
  auto group_end = [&](int s, int i) {
    while (i < prog.length[static_cast<std::size_t>(s)] && prog.at(s, i).group_next) ++i;
    return i + 1;
  };
  auto S = [](int s) { return static_cast<std::size_t>(s); };
  // Pipeline part (chunk·P + stage) that produced the tensor a p2p operation carries:
  // the two ends name it from their own chunk, so compare this instead.
  auto producer = [](int s, const instr& x) {
    const int virt = x.chunk * P + s;
    if (x.kind == op::recv_act) return virt - 1;
    if (x.kind == op::recv_grad) return virt + 1;
    return virt;
  };
  for (;;) {
    bool progress = false, finished = true;
    for (int s = 0; s < P; ++s) {
      // run this stage as far as it can go before visiting the next: keeps the
      // number of rounds (and constexpr steps) proportional to the exchanges
     for (bool moved = true; moved;) {
      moved = false;
      if (pc[S(s)] >= prog.length[S(s)]) break;
      finished = false;
      const instr& x = prog.at(s, pc[S(s)]);
      if (!is_p2p(x.kind)) {
        if (times) times->start[S(s)][static_cast<std::size_t>(pc[S(s)])] = clock[S(s)];
        if (x.kind == op::forward) clock[S(s)] += costs.fwd[S(s)];
        if (x.kind == op::backward) clock[S(s)] += costs.bwd[S(s)];
        if (x.kind == op::weight) clock[S(s)] += costs.wgt[S(s)];
        if (times) times->end[S(s)][static_cast<std::size_t>(pc[S(s)])] = clock[S(s)];
        ++pc[S(s)];
        progress = moved = true;
        continue;
      }
      if (!in_group[S(s)]) {
        in_group[S(s)] = true;
        posted[S(s)] = clock[S(s)];
        done_at[S(s)] = clock[S(s)];
      }
      const int end = group_end(s, pc[S(s)]);
      bool all_done = true;
      for (int i = pc[S(s)]; i < end; ++i) {
        if (done[S(s)][static_cast<std::size_t>(i)]) continue;
        const instr& a = prog.at(s, i);
        const int t = a.peer;
        bool matched = false;
        if (t >= 0 && t < P && in_group[S(t)] && pc[S(t)] < prog.length[S(t)]) {
          const int tend = group_end(t, pc[S(t)]);
          for (int j = pc[S(t)]; j < tend; ++j) {
            if (done[S(t)][static_cast<std::size_t>(j)]) continue;
            const instr& b = prog.at(t, j);
            if (b.peer != s || is_send(b.kind) == is_send(a.kind)) continue;
            // first pending operation in the opposite direction between s and t
            const bool same_stream = (a.kind == op::send_act && b.kind == op::recv_act) ||
                                     (a.kind == op::recv_act && b.kind == op::send_act) ||
                                     (a.kind == op::send_grad && b.kind == op::recv_grad) ||
                                     (a.kind == op::recv_grad && b.kind == op::send_grad);
            if (!same_stream || a.mb != b.mb || producer(s, a) != producer(t, b)) {
              r.status = verdict::mismatch;
              r.stage = s;
              r.instruction = i;
              return r;
            }
            const long long when = posted[S(s)] > posted[S(t)] ? posted[S(s)] : posted[S(t)];
            done[S(s)][static_cast<std::size_t>(i)] = done[S(t)][static_cast<std::size_t>(j)] = true;
            if (when > done_at[S(s)]) done_at[S(s)] = when;
            if (when > done_at[S(t)]) done_at[S(t)] = when;
            matched = true;
            progress = true;
            break;
          }
        }
        if (!matched) all_done = false;
      }
      if (all_done) {
        if (times)
          for (int i = pc[S(s)]; i < end; ++i) {
            times->start[S(s)][static_cast<std::size_t>(i)] = posted[S(s)];
            times->end[S(s)][static_cast<std::size_t>(i)] = done_at[S(s)];
          }
        // W's overlapped with the group run from its posting on
        int next = end;
        long long busy_until = posted[S(s)];
        if (prog.at(s, end - 1).overlap)
          for (; next < prog.length[S(s)] && prog.at(s, next).kind == op::weight; ++next) {
            if (times) times->start[S(s)][static_cast<std::size_t>(next)] = busy_until;
            busy_until += costs.wgt[S(s)];
            if (times) times->end[S(s)][static_cast<std::size_t>(next)] = busy_until;
          }
        clock[S(s)] = done_at[S(s)] > busy_until ? done_at[S(s)] : busy_until;
        in_group[S(s)] = false;
        pc[S(s)] = next;
        progress = moved = true;
      }
     }
    }
    if (finished) break;
    if (!progress) {
      r.status = verdict::deadlock;
      for (int s = 0; s < P; ++s)
        if (pc[S(s)] < prog.length[S(s)]) {
          r.stage = s;
          r.instruction = pc[S(s)];
          break;
        }
      return r;
    }
  }
  for (int s = 0; s < P; ++s)
    if (clock[S(s)] > r.makespan) r.makespan = clock[S(s)];
  for (int s = 0; s < P; ++s) {  // the busiest stage's compute
    const long long b = static_cast<long long>(prog.micro_batches) * prog.chunks *
                        (costs.fwd[S(s)] + costs.bwd[S(s)] + (prog.split_backward ? costs.wgt[S(s)] : 0));
    r.busy = b > r.busy ? b : r.busy;
  }
  return r;
}

// Every stage runs forward and backward of every (micro-batch, chunk) exactly once,
// each backward after its forward, each after receiving what it consumes.
template <int P, int Cap>
constexpr sim_result check_complete(const program<P, Cap>& prog) {
  sim_result r{};
  const int m = prog.micro_batches, v = prog.chunks;
  for (int s = 0; s < P; ++s) {
    std::array<int, 4096> state{};  // 0 none, 1 forward seen, 2 backward seen
    if (m * v > 4096) { r.status = verdict::incomplete; r.stage = s; return r; }
    for (int i = 0; i < prog.length[static_cast<std::size_t>(s)]; ++i) {
      const instr& x = prog.at(s, i);
      if ((x.kind == op::recv_act || x.kind == op::recv_grad) && x.mb >= 0 && x.mb < m && x.chunk >= 0 && x.chunk < v)
        state[static_cast<std::size_t>(x.mb * v + x.chunk)] |= x.kind == op::recv_act ? 4 : 8;
      if (!is_compute(x.kind)) continue;
      const int key = x.mb * v + x.chunk;
      const bool bad_index = x.mb < 0 || x.mb >= m || x.chunk < 0 || x.chunk >= v;
      if (x.kind == op::weight) {  // once, after its B, and only in a split program
        if (bad_index || !prog.split_backward || (state[static_cast<std::size_t>(key)] & 3) != 2 ||
            (state[static_cast<std::size_t>(key)] & 16)) {
          r.status = verdict::incomplete; r.stage = s; r.instruction = i; return r;
        }
        state[static_cast<std::size_t>(key)] |= 16;
        continue;
      }
      const int want = x.kind == op::forward ? 0 : 1;
      if (bad_index || (state[static_cast<std::size_t>(key)] & 3) != want) {
        r.status = verdict::incomplete; r.stage = s; r.instruction = i; return r;
      }
      // data dependencies: the input activation (or output gradient) must have been
      // received from the neighbouring stage before the compute that uses it
      const int virt = x.chunk * P + s;
      const bool needs_act = x.kind == op::forward && virt > 0 && (s + P - 1) % P != s;
      const bool needs_grad = x.kind == op::backward && virt < P * v - 1 && (s + 1) % P != s;
      if ((needs_act && !(state[static_cast<std::size_t>(key)] & 4)) ||
          (needs_grad && !(state[static_cast<std::size_t>(key)] & 8))) {
        r.status = verdict::incomplete; r.stage = s; r.instruction = i; return r;
      }
      state[static_cast<std::size_t>(key)] = (state[static_cast<std::size_t>(key)] & ~3) | (want + 1);
    }
    for (int k = 0; k < m * v; ++k)
      if ((state[static_cast<std::size_t>(k)] & 3) != 2 || (prog.split_backward && !(state[static_cast<std::size_t>(k)] & 16))) {
        r.status = verdict::incomplete; r.stage = s; r.instruction = prog.length[static_cast<std::size_t>(s)]; return r;
      }
  }
  return r;
}

// Largest number of (micro-batch, chunk) activations a stage holds at once.
template <int P, int Cap>
constexpr int peak_in_flight(const program<P, Cap>& prog, int s) {
  int live = 0, peak = 0;
  for (int i = 0; i < prog.length[static_cast<std::size_t>(s)]; ++i) {
    const op k = prog.at(s, i).kind;
    if (k == op::forward && ++live > peak) peak = live;
    if (k == (prog.split_backward ? op::weight : op::backward)) --live;  // the stash goes with its last reader
  }
  return peak;
}

// A fraction in lowest terms (the constructor reduces it).
struct fraction {
  long long num = 0, den = 1;
  constexpr fraction() = default;
  constexpr fraction(long long n, long long d) : num(n), den(d) {
    long long a = n < 0 ? -n : n, b = d < 0 ? -d : d;
    while (b != 0) {
      const long long t = a % b;
      a = b;
      b = t;
    }
    if (a > 1) num /= a, den /= a;
  }
  constexpr double value() const { return den ? static_cast<double>(num) / static_cast<double>(den) : 0.0; }
  friend constexpr bool operator==(fraction a, fraction b) { return a.num * b.den == b.num * a.den; }
};

// Idle share of a stage's time between its first and last compute: (makespan − busy) / makespan.
template <int P, int Cap>
constexpr fraction bubble(const program<P, Cap>& prog, long long fwd_cost = 1, long long bwd_cost = 2,
                          long long wgt_cost = 0) {
  const sim_result r = simulate(prog, fwd_cost, bwd_cost, nullptr, wgt_cost);
  if (r.status != verdict::ok || r.makespan == 0) return {0, 1};
  return {r.makespan - r.busy, r.makespan};
}

}  // namespace strata::sched
