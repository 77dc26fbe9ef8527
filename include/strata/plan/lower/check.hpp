#pragma once
// The proof of a device program (plan/lower/device_program.hpp), beside the schedule's
// (plan/simulate.hpp: the pipeline messages pair up and cannot deadlock). Per stage:
//  * its messages are the schedule's, in the schedule's order — so the schedule's
//    deadlock proof covers the device program;
//  * every collective runs over a group whose members all run this stage's program (the
//    data-parallel replicas and the part's devices): every member posts the same
//    collectives in the same order, so none waits for one that never comes;
//  * every layer call that reads staged weights finds its TaskGraph in the slot it names,
//    filled and waited for; a slot is refilled only after its TaskGraph was released,
//    and read no more after that;
//  * Zero<2/3>: every gradient write goes to the slot its TaskGraph opened in that
//    backward, every bucket is reduced into the shards once per backward of its part,
//    after the writes of its tensors and before its slot is opened again;
//    otherwise every bucket is reduced exactly once per step, after the last write of
//    any of its tensors;
//  * a tied tensor's copies are summed once per step, as the last action of the stages
//    holding them, after every reduction: the pair of stages meet there and nowhere else;
//  * the update applies every group once and (Zero<1/2>) gathers every bucket after it.
#include <array>
#include <cstddef>

#include "strata/plan/lower/device_program.hpp"

namespace strata::lower {

enum class flaw : unsigned char {
  none,
  messages,          // the messages differ from the schedule's
  group,             // a collective over a group that spans stages
  weights_missing,   // a call reads a slot that does not hold its TaskGraph
  weights_unready,   // a call reads a slot whose fill it did not wait for
  slot_in_use,       // a slot filled before its TaskGraph was released
  grads_unopened,    // a gradient write to a slot its TaskGraph did not open
  bucket_early,      // a bucket reduced before a write of one of its tensors
  bucket_count,      // a bucket reduced too often or not at all
  slot_unreduced,    // a gradient slot opened again before its buckets were reduced
  tie,               // a tied tensor's sum missing, repeated, or not the stage's last action
  update             // the update program misses or repeats a group or gather
};

struct proof {
  flaw what = flaw::none;
  int stage = -1, action = -1;
  constexpr bool ok() const { return what == flaw::none; }
};

template <class P>
struct device_check_of {
  using L = lowering<P>;
  using D = device_program_of<P>;
  static constexpr std::size_t idx(int i) { return static_cast<std::size_t>(i); }

  // Whether bucket b of stage s holds part of tensor k of layer i.
  static constexpr bool holds(int s, int b, int i, int k) {
    const bucket& bk = L::tables.buckets[idx(s)][idx(b)];
    const tensor_place& tp = L::tables.params[idx(i)][idx(k)];
    return tp.size > 0 && tp.group == bk.group && bk.offset < tp.offset + tp.size && tp.offset < bk.offset + bk.count;
  }
  // A call that adds into its parameters' gradients (B of a split layer does not).
  static constexpr bool writes(const action& a) { return a.kind == act::backward || a.kind == act::backward_weights; }
  // Whether every member of a group along each axis runs the same stage (two replicas).
  static constexpr std::array<bool, num_group_axes> local_axes = [] {
    std::array<bool, num_group_axes> ok{};
    const int world = 2 * P::devices_per_replica;
    for (int g = 0; g < num_group_axes; ++g) {
      ok[idx(g)] = true;
      for (int r = 0; r < world; ++r)
        for (int o = 0; o < world; ++o)
          if (P::same_group(static_cast<group_axis>(g), r, o, world) && P::coord(r).stage != P::coord(o).stage)
            ok[idx(g)] = false;
    }
    return ok;
  }();
  static constexpr bool stage_local(group_axis g) { return local_axes[static_cast<std::size_t>(g)]; }

  // Proves stage s of `list` (the training program when `training`).
  template <class List, class Prog>
  static constexpr proof stage(const List& list, const Prog& prog, int s, bool training) {
    const auto& T = L::tables;
    const int n = list.length[idx(s)];
    auto bad = [&](flaw f, int i) { return proof{f, s, i}; };
    // messages: the schedule's, in order
    int m = 0;
    for (int i = 0; i < n; ++i) {
      const action& a = list.at(s, i);
      if (a.kind != act::send_act && a.kind != act::recv_act && a.kind != act::send_grad && a.kind != act::recv_grad)
        continue;
      while (m < prog.length[idx(s)] && !sched::is_p2p(prog.at(s, m).kind)) ++m;
      if (m >= prog.length[idx(s)]) return bad(flaw::messages, i);
      const sched::instr& x = prog.at(s, m++);
      const bool same = x.mb == a.mb && x.peer == a.peer && P::part_of(s, x.chunk) == a.part && x.slot == a.slots.act &&
                        x.group_next == a.group_next && x.overlap == a.overlap &&
                        static_cast<int>(x.kind) - static_cast<int>(sched::op::send_act) ==
                            static_cast<int>(a.kind) - static_cast<int>(act::send_act);
      if (!same) return bad(flaw::messages, i);
    }
    for (; m < prog.length[idx(s)]; ++m)
      if (sched::is_p2p(prog.at(s, m).kind)) return bad(flaw::messages, n);

    std::array<int, 2> held{-1, -1};
    std::array<bool, 2> ready{true, true};
    std::array<int, 2> open{-1, -1};  // the TaskGraph each gradient slot holds
    std::array<int, idx(L::max_buckets)> reduced{};
    // Zero<2/3>: buckets whose gradients were written since their last reduction
    std::array<bool, idx(L::max_buckets)> dirty{};
    for (int i = 0; i < n; ++i) {
      const action& a = list.at(s, i);
      // collectives over groups within the stage
      if (a.kind == act::convert && !stage_local(T.convs[idx(a.index)].group)) return bad(flaw::group, i);
      if ((a.kind == act::reduce_bucket || a.kind == act::gather_weights) &&
          !stage_local(a.kind == act::reduce_bucket ? T.buckets[idx(s)][idx(a.index)].axis : P::shard_axis))
        return bad(flaw::group, i);
      if (is_layer_call(a.kind))
        for (int g = 0; g < T.calls[idx(a.index)].num_groups; ++g)
          if (!stage_local(T.calls[idx(a.index)].groups[idx(g)])) return bad(flaw::group, i);
      switch (a.kind) {
        case act::release_weights: held[idx(a.wslot)] = -1; break;
        case act::fill_weights:
        case act::gather_weights:
          if (held[idx(a.wslot)] >= 0) return bad(flaw::slot_in_use, i);
          held[idx(a.wslot)] = a.index;
          ready[idx(a.wslot)] = a.kind == act::gather_weights;  // a gather completes in order
          break;
        case act::wait_weights: ready[idx(a.wslot)] = true; break;
        case act::open_grads:
          if (open[idx(a.gslot)] >= 0)
            for (int b = 0; b < T.num_buckets[idx(s)]; ++b)
              if (T.buckets[idx(s)][idx(b)].taskgraph == open[idx(a.gslot)] && dirty[idx(b)])
                return bad(flaw::slot_unreduced, i);
          open[idx(a.gslot)] = a.index;
          break;
        case act::reduce_bucket: {
          const bucket& bk = T.buckets[idx(s)][idx(a.index)];
          if (D::layout.grads_sharded && (a.gslot < 0 || open[idx(a.gslot)] != bk.taskgraph))
            return bad(flaw::grads_unopened, i);
          ++reduced[idx(a.index)];
          dirty[idx(a.index)] = false;
          break;
        }
        default: break;
      }
      if (!is_layer_call(a.kind) || T.calls[idx(a.index)].num_params == 0) continue;
      const layer_call& c = T.calls[idx(a.index)];
      if (D::layout.staged) {
        if (a.wslot < 0 || held[idx(a.wslot)] != c.taskgraph) return bad(flaw::weights_missing, i);
        if (!ready[idx(a.wslot)]) return bad(flaw::weights_unready, i);
      }
      if (!writes(a)) continue;
      if (D::layout.grads_sharded && (a.gslot < 0 || open[idx(a.gslot)] != c.taskgraph))
        return bad(flaw::grads_unopened, i);
      // this write must come before every reduction of a bucket holding its tensors
      for (int b = 0; b < T.num_buckets[idx(s)]; ++b)
        for (int k = 0; k < c.num_params; ++k)
          if (holds(s, b, a.index, k)) {
            if (!D::layout.grads_sharded && reduced[idx(b)] > 0) return bad(flaw::bucket_early, i);
            dirty[idx(b)] = true;
          }
    }
    // the tied copies' sum: once, last, on the stages holding a copy (training only)
    int ties = 0;
    for (int i = 0; i < n; ++i)
      if (list.at(s, i).kind == act::tie_grads) {
        ++ties;
        if (i != n - 1 || a_finish_before(list, s, i) == false) return bad(flaw::tie, i);
      }
    const bool holds = s == D::tie_owner_stage || s == D::tie_user_stage;
    if (ties != (training && holds ? 1 : 0)) return bad(flaw::tie, n);
    if (!training) return proof{};
    // every bucket reduced: once per step, or under Zero<2/3> once per backward of its part
    for (int b = 0; b < T.num_buckets[idx(s)]; ++b) {
      int want = 1;
      if (D::layout.grads_sharded) {
        want = 0;
        const int part = P::layer_plans[idx(T.buckets[idx(s)][idx(b)].layer)].part;
        for (int k = 0; k < prog.length[idx(s)]; ++k)
          want += prog.at(s, k).kind == sched::op::backward && P::part_of(s, prog.at(s, k).chunk) == part;
      }
      if (reduced[idx(b)] != want || dirty[idx(b)]) return bad(flaw::bucket_count, n);
    }
    // the update
    const auto& u = D::update;
    std::array<int, idx(D::layout.apply_groups)> applied{};
    std::array<int, idx(L::max_buckets)> gathered{};
    for (int i = 0; i < u.length[idx(s)]; ++i) {
      const action& a = u.at(s, i);
      if (a.kind == act::apply_group) ++applied[idx(a.index)];
      if (a.kind == act::gather_bucket) {
        for (int g : applied)
          if (g != 1) return bad(flaw::update, i);
        ++gathered[idx(a.index)];
      }
    }
    for (int g : applied)
      if (g != 1) return bad(flaw::update, u.length[idx(s)]);
    const bool gathers = D::layout.partitioned && !D::layout.masters_sharded;
    for (int b = 0; b < T.num_buckets[idx(s)]; ++b)
      if (gathered[idx(b)] != (gathers ? 1 : 0)) return bad(flaw::update, u.length[idx(s)]);
    return proof{};
  }

  // Whether a finish of the reductions comes right before action i.
  template <class List>
  static constexpr bool a_finish_before(const List& list, int s, int i) {
    return i > 0 && list.at(s, i - 1).kind == act::finish_reductions;
  }

  template <class List, class Prog>
  static constexpr proof all(const List& list, const Prog& prog, bool training) {
    for (int s = 0; s < L::NS; ++s)
      if (const proof p = stage(list, prog, s, training); !p.ok()) return p;
    return proof{};
  }

  static constexpr proof train = all(D::train, L::train.prog, true);
  static constexpr proof eval = all(D::eval, L::eval.prog, false);
};

// The program of a Plan is its passes' program (one instantiation for both).
template <class P>
using device_check = device_check_of<typename P::passes>;

}  // namespace strata::lower
