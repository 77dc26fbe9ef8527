#pragma once
// The simulator that proves a program's sends and receives pair up (deadlock freedom),
// the completeness check, and what they measure: makespan, bubble, activations in flight.
#include <array>
#include <cstddef>
#include <type_traits>

#include "strata/plan/program.hpp"

namespace strata::sched {

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
  // Pipeline part that produced the tensor a p2p operation carries: the two ends name it
  // from their own chunk, so compare this instead.
  auto producer = [&prog](int s, const instr& x) {
    const int part = prog.part_of(s, x.chunk);
    if (x.kind == op::recv_act) return part - 1;
    if (x.kind == op::recv_grad) return part + 1;
    return part;
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
      // received from the neighbouring stage before the compute that uses it, or, when
      // the neighbouring part runs here, computed here before
      const int part = prog.part_of(s, x.chunk), from = x.kind == op::forward ? part - 1 : part + 1;
      if (from >= 0 && from < P * v) {
        bool ok = true;
        if (prog.stage_of(from) != s) {
          ok = (state[static_cast<std::size_t>(key)] & (x.kind == op::forward ? 4 : 8)) != 0;
        } else {  // its chunk here is from / P
          ok = (state[static_cast<std::size_t>(x.mb * v + from / P)] & 3) >= want + 1;
        }
        if (!ok) { r.status = verdict::incomplete; r.stage = s; r.instruction = i; return r; }
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
constexpr fraction bubble_of(const program<P, Cap>& prog, const stage_costs<P>& costs) {
  const sim_result r = simulate_costs(prog, costs);
  if (r.status != verdict::ok || r.makespan == 0) return {0, 1};
  return {r.makespan - r.busy, r.makespan};
}
template <int P, int Cap>
constexpr fraction bubble(const program<P, Cap>& prog, long long fwd_cost = 1, long long bwd_cost = 2,
                          long long wgt_cost = 0) {
  return bubble_of(prog, stage_costs<P>::uniform(fwd_cost, bwd_cost, wgt_cost));
}

// The costs the plan's analyses and trace use, in units of a forward: a backward 2, or
// when the program splits backwards B 1 and W 1.
template <int P, int Cap>
constexpr stage_costs<P> unit_costs(const program<P, Cap>& prog) {
  return prog.split_backward ? stage_costs<P>::uniform(1, 1, 1) : stage_costs<P>::uniform(1, 2, 0);
}

}  // namespace strata::sched
