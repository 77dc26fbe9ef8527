#pragma once
// The communication analysis: every collective a device of a stage takes part in per
// step, with its bytes, read off the lowered program (plan/lower.hpp). Plan::communication
// and Plan::communication_of call it.
#include <array>
#include <cstddef>

#include "strata/core/sbp.hpp"
#include "strata/plan/lower.hpp"
#include "strata/plan/schedule.hpp"
#include "strata/plan/sharding.hpp"

namespace strata {

// One collective of a training step, per device, summed over micro-batches.
struct comm_total {
  collective kind = collective::none;
  group_axis group = group_axis::part;
  pass when = pass::forward;
  int layer = -1;       // −1: pipeline transfer or gradient reduction
  int part = 0;
  long long bytes = 0;  // payload per device per step
  int calls = 0;        // per step
};

namespace detail {

// Zero<3>: how often a device of `stage` stages each TaskGraph's weights in one training
// step. As exec/store.hpp does: every layer call with parameters (forward, backward,
// recomputed forward) reads its TaskGraph from one of two slots, empty when the step
// begins and refilled in turn (first in, first out) on a miss.
template <class P>
constexpr std::array<int, static_cast<std::size_t>(P::num_taskgraphs)> taskgraph_stagings(int stage) {
  constexpr auto idx = [](int i) { return static_cast<std::size_t>(i); };
  const auto& T = P::lowering::tables;
  const auto& prog = P::lowering::train.prog;
  std::array<int, idx(P::num_taskgraphs)> n{};
  int slot[2] = {-1, -1}, next = 0;
  for (int i = 0; i < prog.length[idx(stage)]; ++i) {
    const sched::instr& x = prog.at(stage, i);
    if (x.kind != sched::op::forward && x.kind != sched::op::backward) continue;
    const lower::part_plan& pp = T.parts[idx(P::part_of(stage, x.chunk))];
    const bool fwd = x.kind == sched::op::forward;
    for (int k = fwd ? pp.fwd_begin : pp.bwd_begin; k < (fwd ? pp.fwd_end : pp.bwd_end); ++k) {
      const lower::step& st = T.steps[idx(k)];
      const bool call = st.kind == lower::step_kind::forward || st.kind == lower::step_kind::backward ||
                        st.kind == lower::step_kind::recompute;
      if (!call || P::layer_plans[idx(st.index)].desc.num_params == 0) continue;
      const int tg = P::layer_plans[idx(st.index)].taskgraph;
      if (slot[0] == tg || slot[1] == tg) continue;
      slot[next] = tg;
      next ^= 1;
      ++n[idx(tg)];
    }
  }
  return n;
}

// Fills `t` (rows, size) for a device of `stage` at data-parallel degree `dp` (0:
// unknown, data-group reductions listed as for dp > 1); t_bytes, s_bytes and m_bytes are
// the sizes of an activation, a statistic and a master value. The bytes of a call are
// its larger local buffer, as comm_desc counts.
template <class P, class Table>
constexpr void list_communication(Table& t, int stage, int dp, long long t_bytes, long long s_bytes, long long m_bytes) {
  constexpr auto idx = [](int i) { return static_cast<std::size_t>(i); };
  auto add = [&](comm_total c) {
    if (t.size < static_cast<int>(t.rows.size())) t.rows[idx(t.size++)] = c;
  };
  const auto& T = P::lowering::tables;
  const int m = P::num_micro_batch;
  for (int p = 0; p < P::num_parts; ++p) {
    const lower::part_plan& pp = T.parts[idx(p)];
    if (pp.stage != stage || pp.first < 0) continue;
    // conversions, in the order the part runs them
    for (int k = pp.fwd_begin; k < pp.bwd_end; ++k) {
      const lower::step& st = T.steps[idx(k)];
      if (st.kind != lower::step_kind::convert) continue;
      const lower::conversion& c = T.convs[idx(st.index)];
      if (c.coll == collective::none) continue;
      add(comm_total{c.coll, group_axis::part, c.when, c.layer, p, c.comm_elems * t_bytes * m, m});
    }
    // collectives inside layers (after the conversions the sharding pass listed first);
    // a recomputed layer's forward ones run twice
    for (int i = pp.first; i <= pp.last; ++i) {
      const layer_plan& lp = P::layer_plans[idx(i)];
      for (int k = lp.num_conversion_comms; k < lp.num_comms; ++k) {
        const comm_desc& c = lp.comms[idx(k)];
        const long long eb = c.stats ? s_bytes : t_bytes;
        const int runs = c.when == pass::forward && P::recompute_region[idx(i)] >= 0 ? 2 : 1;
        add(comm_total{c.kind, c.group, c.when, i, p, c.elems * eb * c.calls * m * runs, c.calls * m * runs});
      }
    }
  }
  // Pipeline messages this stage sends: activations forward, input gradients backward.
  for (int p = 0; p < P::num_parts; ++p) {
    const lower::part_plan& pp = T.parts[idx(p)];
    if (pp.stage != stage) continue;
    int acts = 0, grads = 0;
    for (int i = 0; i < P::lowering::train.prog.length[idx(stage)]; ++i) {
      const sched::instr& x = P::lowering::train.prog.at(stage, i);
      if (P::part_of(stage, x.chunk) != p) continue;
      acts += x.kind == sched::op::send_act;
      grads += x.kind == sched::op::send_grad;
    }
    if (acts > 0)
      add(comm_total{collective::send_recv, group_axis::pipeline, pass::forward, -1, p,
                     pp.exit.elems * t_bytes * acts, acts});
    if (grads > 0)
      add(comm_total{collective::send_recv, group_axis::pipeline, pass::backward, -1, p,
                     pp.gin.elems * t_bytes * grads, grads});
  }
  // Gradient buckets in master precision (fp16 with HalfGradientReduce): once per step, or
  // under Zero<2/3> after every micro-batch's backward. ZeRO's all-gathers move parameters
  // in master precision: once per step after the update, or under Zero<3> each time a
  // TaskGraph is staged.
  const long long g_bytes = P::half_reduce > 0 ? 2 : m_bytes;
  const int reductions = P::zero >= 2 ? m : 1;
  std::array<int, static_cast<std::size_t>(P::num_taskgraphs)> stagings{};
  if constexpr (P::zero >= 3) stagings = taskgraph_stagings<P>(stage);
  // one row per reduction axis: data and part_data (every plan), and the N-D modes' depth,
  // column and plane groups
  constexpr std::array<group_axis, 5> axes{group_axis::data, group_axis::part_data, group_axis::depth_data,
                                           group_axis::col_data, group_axis::plane_data};
  for (const group_axis axis : axes) {
    const int group_size = (dp > 0 ? dp : 2) * P::reduction_devices(axis);
    if (group_size == 1) continue;
    long long elems = 0, chunks = 0, tails = 0, gathered = 0;
    int calls = 0, chunk_calls = 0, tail_calls = 0, gathers = 0;
    for (int b = 0; b < T.num_buckets[idx(stage)]; ++b) {
      const lower::bucket& bk = T.buckets[idx(stage)][idx(b)];
      if (bk.axis != axis) continue;
      elems += bk.count;
      ++calls;
      // ZeRO: the bucket's R equal chunks are reduce-scattered (and all-gathered); the
      // tail (count mod R) is all-reduced (exec/zero.hpp)
      const long long q = bk.count / group_size, tail = bk.count - q * group_size;
      if (q > 0) {
        chunks += q * group_size, ++chunk_calls;
        const int times = P::zero >= 3 ? stagings[idx(bk.taskgraph)] : 1;
        gathered += q * group_size * times, gathers += times;
      }
      if (tail > 0) tails += tail, ++tail_calls;
    }
    if (P::zero == 0) {
      if (calls > 0) add(comm_total{collective::all_reduce, axis, pass::backward, -1, -1, elems * g_bytes, calls});
      continue;
    }
    if (chunk_calls > 0)
      add(comm_total{collective::reduce_scatter, axis, pass::backward, -1, -1, chunks * g_bytes * reductions,
                     chunk_calls * reductions});
    if (gathers > 0)
      add(comm_total{collective::all_gather, axis, P::zero >= 3 ? pass::forward : pass::backward, -1, -1,
                     gathered * m_bytes, gathers});
    if (tail_calls > 0)
      add(comm_total{collective::all_reduce, axis, pass::backward, -1, -1, tails * g_bytes * reductions,
                     tail_calls * reductions});
  }
}

}  // namespace detail
}  // namespace strata
