#pragma once
// The communication analysis: every collective a device of a stage takes part in per
// step, with its bytes, read off the lowered program (plan/lower.hpp). Plan::communication
// and Plan::communication_of call it.
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
  // Gradient buckets, once per step, in master precision (fp16 with HalfGradientReduce);
  // ZeRO's all-gather moves parameters, in master precision.
  const long long g_bytes = P::half_reduce > 0 ? 2 : m_bytes;
  for (int g = 0; g < 2; ++g) {
    const int group_size = (dp > 0 ? dp : 2) * (g == 1 ? P::part_devices : 1);
    if (group_size == 1) continue;
    const group_axis axis = g == 1 ? group_axis::part_data : group_axis::data;
    long long elems = 0, chunks = 0, tails = 0;
    int calls = 0, chunk_calls = 0, tail_calls = 0;
    for (int b = 0; b < T.num_buckets[idx(stage)]; ++b) {
      const lower::bucket& bk = T.buckets[idx(stage)][idx(b)];
      if (bk.group != g) continue;
      elems += bk.count;
      ++calls;
      // Zero<1>: the bucket's R equal chunks are reduce-scattered, then all-gathered after
      // the update; the tail (count mod R) is all-reduced (exec/zero.hpp)
      const long long q = bk.count / group_size, tail = bk.count - q * group_size;
      if (q > 0) chunks += q * group_size, ++chunk_calls;
      if (tail > 0) tails += tail, ++tail_calls;
    }
    if (P::zero == 0) {
      if (calls > 0) add(comm_total{collective::all_reduce, axis, pass::backward, -1, -1, elems * g_bytes, calls});
      continue;
    }
    if (chunk_calls > 0) {
      add(comm_total{collective::reduce_scatter, axis, pass::backward, -1, -1, chunks * g_bytes, chunk_calls});
      add(comm_total{collective::all_gather, axis, pass::backward, -1, -1, chunks * m_bytes, chunk_calls});
    }
    if (tail_calls > 0) add(comm_total{collective::all_reduce, axis, pass::backward, -1, -1, tails * g_bytes, tail_calls});
  }
}

}  // namespace detail
}  // namespace strata
