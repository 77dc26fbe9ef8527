#pragma once
// The device program: every action a device of a stage runs, in order, for a training
// step, for one micro-batch of an evaluation, and for the update.
//
// Each schedule instruction is expanded from its part's step list with its micro-batch
// and slots; then what depends on the whole step is placed:
//  * staged weights (Offload, CastWeightsPerUse): every layer call with parameters reads
//    its TaskGraph from one of two slots, refilled first in, first out on a miss; each
//    refill is issued as early as its slot is free — right after the last read of the
//    TaskGraph it evicts (release, fill on the copy queue) — and waited for at its first
//    read. Zero<3> all-gathers the TaskGraph into the slot at the read that misses (its
//    unshard), after releasing what the slot held (its reshard).
//  * Zero<2/3>: each backward opens a gradient slot per TaskGraph with parameters, the
//    two slots in turn, and every backward reduces its buckets (reduce-scatter into the
//    shards); otherwise each part's final backward (or W) reduces them, in the last pass
//    of a run-time gradient accumulation only.
//  * the reduction's end (the schedule's reduce-grads), and the update program: the
//    ApplyGroups groups, ZeRO-1/2's all-gather of the updated chunks, the refresh.
// exec/executor.hpp runs exactly these; plan/lower/check.hpp proves them.
#include <array>
#include <cstddef>

#include "strata/plan/lower.hpp"

namespace strata::lower {

namespace detail {

// The staging of one program's weight reads: the slot of every read, whether it misses,
// and the fills issued right before it (−1: none).
template <int Uses>
struct staging_plan {
  std::array<int, static_cast<std::size_t>(Uses)> tg{}, slot{};
  std::array<bool, static_cast<std::size_t>(Uses)> miss{};
  std::array<std::array<int, 2>, static_cast<std::size_t>(Uses)> issue{};
  int uses = 0;
};

// Two first-in-first-out slots, empty when the program starts; a miss's fill is issued
// right after the last read of the slot's previous TaskGraph.
template <int Uses>
constexpr void plan_staging(staging_plan<Uses>& s) {
  for (auto& i : s.issue) i = {-1, -1};
  int held[2] = {-1, -1}, next = 0, last_read[2] = {-1, -1};
  for (int j = 0; j < s.uses; ++j) {
    const int t = s.tg[idx(j)];
    int k = held[0] == t ? 0 : held[1] == t ? 1 : -1;
    if (k < 0) {
      k = next;
      next ^= 1;
      held[k] = t;
      s.miss[idx(j)] = true;
      auto& at = s.issue[idx(last_read[k] + 1)];
      at[at[0] < 0 ? 0 : 1] = j;
    }
    s.slot[idx(j)] = k;
    last_read[k] = j;
  }
}

}  // namespace detail

template <class P>
struct device_program_of {
  using L = lowering<P>;
  static constexpr int NS = L::NS;
  static constexpr std::size_t idx(int i) { return static_cast<std::size_t>(i); }
  static constexpr param_layout layout = L::params;

  // An action list with the first action of each schedule instruction.
  template <int Cap, int ICap>
  struct list {
    std::array<std::array<action, idx(Cap)>, idx(NS)> acts{};
    std::array<int, idx(NS)> length{};
    std::array<std::array<int, idx(ICap) + 1>, idx(NS)> begin{};
    constexpr const action& at(int s, int i) const { return acts[idx(s)][idx(i)]; }
  };

 private:
  // Walks stage s's expansion of `prog`, giving each action to `emit` in order and
  // calling `mark(i)` before instruction i's actions. `stg` places the staging actions
  // (null: the first walk, which only collects the weight reads into `reads`).
  template <class Prog, int Uses, class Emit, class Mark>
  static constexpr void walk(int s, const Prog& prog, bool training, const detail::staging_plan<Uses>* stg,
                             detail::staging_plan<Uses>* reads, Emit&& emit, Mark&& mark) {
    const auto& T = L::tables;
    int use = 0;                          // weight reads so far
    std::array<int, 2> slot_tg{-1, -1};   // staging: what each slot holds
    std::array<bool, 2> waited{true, true};
    int next_gslot = 0;
    std::array<int, idx(P::num_taskgraphs) + 1> gslot_of{};
    for (int& g : gslot_of) g = -1;
    const int gslots = L::gradient_slots(s);
    auto read_weights = [&](action& a) {  // a layer call with parameters reads its TaskGraph
      const int tg = T.calls[idx(a.index)].taskgraph;
      if (!layout.staged) return;
      if (!stg) {
        if (reads) reads->tg[idx(reads->uses++)] = tg;
        return;
      }
      const int j = use++;
      auto release_and = [&](act k, int f) {
        const int slot = stg->slot[idx(f)];
        if (slot_tg[idx(slot)] >= 0) emit(action{.kind = act::release_weights, .index = slot_tg[idx(slot)], .wslot = slot});
        emit(action{.kind = k, .index = stg->tg[idx(f)], .wslot = slot});
        slot_tg[idx(slot)] = stg->tg[idx(f)];
      };
      if (layout.masters_sharded) {
        if (stg->miss[idx(j)]) release_and(act::gather_weights, j);
      } else {
        for (int f : stg->issue[idx(j)])
          if (f >= 0) release_and(act::fill_weights, f), waited[idx(stg->slot[idx(f)])] = false;
        if (!waited[idx(stg->slot[idx(j)])]) {
          emit(action{.kind = act::wait_weights, .index = tg, .wslot = stg->slot[idx(j)]});
          waited[idx(stg->slot[idx(j)])] = true;
        }
      }
      a.wslot = stg->slot[idx(j)];
    };
    for (int i = 0; i < prog.length[idx(s)]; ++i) {
      mark(i);
      const sched::instr& x = prog.at(s, i);
      const int part = P::part_of(s, x.chunk);
      const part_plan& pp = T.parts[idx(part)];
      const slot_set slots{x.slot, x.in_slot, x.out_slot};
      int open_tg = -1;  // Zero<2/3>: the TaskGraph whose gradient slot this backward writes
      auto steps = [&](int from, int to, bool buckets) {
        for (int k = from; k < to; ++k) {
          const step st = T.steps[idx(k)];
          action a{.kind = st.kind, .index = st.index, .part = part, .mb = x.mb, .slots = slots};
          if (st.kind == act::reduce_bucket) {
            if (!buckets) continue;
            const bucket& bk = T.buckets[idx(s)][idx(st.index)];
            a.every_pass = layout.grads_sharded;
            a.chunks = layout.partitioned;
            a.half = layout.half_scale > 0;
            a.gslot = layout.grads_sharded ? gslot_of[idx(bk.taskgraph)] : -1;
            emit(a);
            if (layout.grads_sharded) emit(action{.kind = act::shard_bucket, .index = st.index, .gslot = a.gslot});
            continue;
          }
          if (is_layer_call(st.kind) && T.calls[idx(st.index)].num_params > 0) {
            read_weights(a);
            const int tg = T.calls[idx(st.index)].taskgraph;
            const bool writes = st.kind == act::backward || st.kind == act::backward_weights;
            if (layout.grads_sharded && writes && tg != open_tg) {
              gslot_of[idx(tg)] = next_gslot;
              emit(action{.kind = act::open_grads, .index = tg, .gslot = next_gslot});
              next_gslot = (next_gslot + 1) % gslots;
              open_tg = tg;
            }
            if (layout.grads_sharded && writes) a.gslot = gslot_of[idx(tg)];
          }
          emit(a);
        }
      };
      switch (x.kind) {
        case sched::op::forward: steps(pp.fwd_begin, pp.fwd_end, false); break;
        // buckets go out in every backward under Zero<2/3>, else in the part's last one
        case sched::op::backward: steps(pp.bwd_begin, pp.bwd_end, layout.grads_sharded || x.last); break;
        case sched::op::weight: steps(pp.wgt_begin, pp.wgt_end, x.last); break;
        case sched::op::send_act:
        case sched::op::recv_act:
        case sched::op::send_grad:
        case sched::op::recv_grad: {
          const act k = x.kind == sched::op::send_act   ? act::send_act
                        : x.kind == sched::op::recv_act ? act::recv_act
                        : x.kind == sched::op::send_grad ? act::send_grad
                                                         : act::recv_grad;
          emit(action{.kind = k, .part = part, .mb = x.mb, .slots = {x.slot, x.slot, x.slot}, .peer = x.peer,
                      .group_next = x.group_next, .overlap = x.overlap});
          break;
        }
        case sched::op::reduce_grads:
          if (training) {
            emit(action{.kind = act::finish_reductions, .every_pass = false});
            // a tied tensor's copies on this stage (both, or one of a pair of stages)
            if (holds_tie(s)) emit(action{.kind = act::tie_grads, .index = P::tie.user, .every_pass = false});
            // kept statistics, once the step's last forward has added to their sums
            for (int i = 0; i < P::num_layers; ++i)
              if (T.calls[idx(i)].state_off >= 0 && T.parts[idx(P::layer_plans[idx(i)].part)].stage == s) {
                emit(action{.kind = act::reduce_state, .index = i, .part = P::layer_plans[idx(i)].part, .every_pass = false});
                emit(action{.kind = act::fold_state, .index = i, .part = P::layer_plans[idx(i)].part, .every_pass = false});
              }
          }
          break;
        case sched::op::optimizer_step: break;  // the update program, run once the loss is known
      }
    }
    mark(prog.length[idx(s)]);
  }

  // Whether stage s holds a copy of the tied tensor (the owner's or the user's).
  static constexpr bool holds_tie(int s) {
    return P::tie.any() && (P::stage_of_part(P::layer_plans[idx(P::tie.owner)].part) == s ||
                            P::stage_of_part(P::layer_plans[idx(P::tie.user)].part) == s);
  }

 public:
  // The stages holding the tied tensor's copies (equal: one stage holds both), or −1.
  static constexpr int tie_owner_stage = P::tie.any() ? P::stage_of_part(P::layer_plans[idx(P::tie.owner)].part) : -1;
  static constexpr int tie_user_stage = P::tie.any() ? P::stage_of_part(P::layer_plans[idx(P::tie.user)].part) : -1;

 private:
  // Layer calls with parameters in stage s's expansion of `prog` (its weight reads).
  template <class Prog>
  static constexpr int count_reads(int s, const Prog& prog) {
    const auto& T = L::tables;
    int reads = 0;
    for (int i = 0; i < prog.length[idx(s)]; ++i) {
      const sched::instr& x = prog.at(s, i);
      const part_plan& pp = T.parts[idx(P::part_of(s, x.chunk))];
      int from = 0, to = 0;
      if (x.kind == sched::op::forward) from = pp.fwd_begin, to = pp.fwd_end;
      if (x.kind == sched::op::backward) from = pp.bwd_begin, to = pp.bwd_end;
      if (x.kind == sched::op::weight) from = pp.wgt_begin, to = pp.wgt_end;
      for (int k = from; k < to; ++k)
        reads += is_layer_call(T.steps[idx(k)].kind) && T.calls[idx(T.steps[idx(k)].index)].num_params > 0;
    }
    return reads;
  }
  template <class Prog>
  static constexpr int max_reads(const Prog& prog) {
    if (!layout.staged) return 1;
    int m = 1;
    for (int s = 0; s < NS; ++s) m = count_reads(s, prog) > m ? count_reads(s, prog) : m;
    return m;
  }

  template <int Uses, class Prog>
  static constexpr detail::staging_plan<Uses> staging_of(int s, const Prog& prog, bool training) {
    detail::staging_plan<Uses> st{};
    walk<Prog, Uses>(s, prog, training, nullptr, &st, [](const action&) {}, [](int) {});
    detail::plan_staging(st);
    return st;
  }

  template <int Uses, class Prog>
  static constexpr int count_actions(const Prog& prog, bool training) {
    int most = 1;
    for (int s = 0; s < NS; ++s) {
      const auto st = staging_of<Uses>(s, prog, training);
      int n = 0;
      walk<Prog, Uses>(s, prog, training, &st, nullptr, [&](const action&) { ++n; }, [](int) {});
      most = n > most ? n : most;
    }
    return most;
  }

  template <int Cap, int Uses, class Prog>
  static constexpr auto expand(const Prog& prog, bool training) {
    constexpr int ICap = Prog::capacity;
    list<Cap, ICap> out{};
    for (int s = 0; s < NS; ++s) {
      const auto st = staging_of<Uses>(s, prog, training);
      walk<Prog, Uses>(
          s, prog, training, &st, nullptr,
          [&](const action& a) { out.acts[idx(s)][idx(out.length[idx(s)]++)] = a; },
          [&](int i) { out.begin[idx(s)][idx(i)] = out.length[idx(s)]; });
    }
    return out;
  }

  static constexpr int train_reads = max_reads(L::train.prog);
  static constexpr int eval_reads = max_reads(L::eval.prog);
  static constexpr int train_cap = count_actions<train_reads>(L::train.prog, true);
  static constexpr int eval_cap = count_actions<eval_reads>(L::eval.prog, false);

  static constexpr int update_cap = layout.apply_groups + L::max_buckets + 2;
  struct update_list {
    std::array<std::array<action, idx(update_cap)>, idx(NS)> acts{};
    std::array<int, idx(NS)> length{};
    constexpr const action& at(int s, int i) const { return acts[idx(s)][idx(i)]; }
  };
  static constexpr update_list build_update() {
    update_list u{};
    for (int s = 0; s < NS; ++s) {
      auto emit = [&](action a) { u.acts[idx(s)][idx(u.length[idx(s)]++)] = a; };
      for (int g = 0; g < layout.apply_groups; ++g) emit(action{.kind = act::apply_group, .index = g});
      // Zero<1/2>: each device updated its chunks of the masters; Zero<3> keeps them so
      if (layout.partitioned && !layout.masters_sharded) {
        for (int b = 0; b < L::tables.num_buckets[idx(s)]; ++b)
          emit(action{.kind = act::gather_bucket, .index = b, .chunks = true});
        emit(action{.kind = act::finish_reductions});
      }
      emit(action{.kind = act::refresh_weights});
    }
    return u;
  }

 public:
  // The training step's actions (up to the update), an evaluation's for one micro-batch
  // (its mb is the executor's), and the update's.
  static constexpr auto train = expand<train_cap, train_reads>(L::train.prog, true);
  static constexpr auto eval = expand<eval_cap, eval_reads>(L::eval.prog, false);
  static constexpr update_list update = build_update();
};

// The program of a Plan is its passes' program (one instantiation for both).
template <class P>
using device_program = device_program_of<typename P::passes>;

}  // namespace strata::lower
