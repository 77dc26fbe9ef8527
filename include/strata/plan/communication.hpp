#pragma once
// The communication analysis: every collective a device of a stage takes part in per
// step, with its bytes, read off the device program (plan/lower/device_program.hpp).
// Plan::communication and Plan::communication_of call it with the plan's passes.
#include <array>
#include <cstddef>

#include "strata/core/sbp.hpp"
#include "strata/plan/lower.hpp"
#include "strata/plan/lower/device_program.hpp"
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
// the sizes of an activation, a statistic and a master value. Every row is counted off
// the device program's actions (plan/lower/device_program.hpp) — a training step's and
// the update's — with a call's bytes its larger local buffer, as comm_desc counts:
// layout conversions and layers' own collectives (a recomputed layer's forward ones
// again), the pipeline messages this stage sends, and the gradient and parameter
// collectives one row per kind and reduction axis.
template <class P, class Table>
constexpr void list_communication(Table& t, int stage, int dp, long long t_bytes, long long s_bytes, long long m_bytes) {
  constexpr auto idx = [](int i) { return static_cast<std::size_t>(i); };
  using L = lower::lowered<P>;
  using D = lower::device_program<P>;
  const auto& T = L::tables;
  const auto& prog = D::train;
  const int n = prog.length[idx(stage)];
  // a row per (kind, group, pass, layer, part), in order of first appearance
  auto add = [&](comm_total c) {
    for (int r = 0; r < t.size; ++r) {
      comm_total& o = t.rows[idx(r)];
      if (o.kind == c.kind && o.group == c.group && o.when == c.when && o.layer == c.layer && o.part == c.part) {
        o.bytes += c.bytes, o.calls += c.calls;
        return;
      }
    }
    if (t.size < static_cast<int>(t.rows.size())) t.rows[idx(t.size++)] = c;
  };
  // conversions and the layers' own collectives, part by part
  for (int p = 0; p < P::num_parts; ++p) {
    if (T.parts[idx(p)].stage != stage || T.parts[idx(p)].first < 0) continue;
    for (int i = 0; i < n; ++i) {
      const lower::action& a = prog.at(stage, i);
      if (a.part != p) continue;
      if (a.kind == lower::act::convert) {
        const lower::conversion& c = T.convs[idx(a.index)];
        if (c.coll != collective::none) add(comm_total{c.coll, c.group, c.when, c.layer, p, c.comm_elems * t_bytes, 1});
      }
    }
    for (int i = 0; i < n; ++i) {
      const lower::action& a = prog.at(stage, i);
      if (a.part != p || !lower::is_layer_call(a.kind) || a.kind == lower::act::backward_weights) continue;
      const layer_plan& lp = P::layer_plans[idx(a.index)];
      const bool fwd = a.kind == lower::act::forward || a.kind == lower::act::recompute;
      for (int k = lp.num_conversion_comms; k < lp.num_comms; ++k) {
        const comm_desc& c = lp.comms[idx(k)];
        if ((c.when == pass::forward) != fwd) continue;
        add(comm_total{c.kind, c.group, c.when, a.index, p, c.elems * (c.stats ? s_bytes : t_bytes) * c.calls, c.calls});
      }
    }
  }
  // pipeline messages this stage sends: activations forward, input gradients backward
  for (int p = 0; p < P::num_parts; ++p)
    for (int i = 0; i < n; ++i) {
      const lower::action& a = prog.at(stage, i);
      if (a.part != p || (a.kind != lower::act::send_act && a.kind != lower::act::send_grad)) continue;
      const bool fwd = a.kind == lower::act::send_act;
      const long long e = fwd ? T.parts[idx(p)].exit.elems : T.parts[idx(p)].gin.elems;
      add(comm_total{collective::send_recv, group_axis::pipeline, fwd ? pass::forward : pass::backward, -1, p, e * t_bytes, 1});
    }
  // gradient and parameter collectives, per reduction axis: a bucket all-reduced, or as
  // ZeRO's chunks (reduce-scattered, all-gathered) and tail (all-reduced), in master
  // precision (fp16 under HalfGradientReduce); Zero<3>'s gathers of a TaskGraph's buckets
  constexpr std::array<group_axis, 6> axes{group_axis::data,     group_axis::part_data,  group_axis::depth_data,
                                           group_axis::col_data, group_axis::plane_data, group_axis::context_data};
  for (const group_axis axis : axes) {
    const int R = (dp > 0 ? dp : 2) * P::reduction_devices(axis);
    if (R == 1) continue;
    comm_total whole{collective::all_reduce, axis, pass::backward, -1, -1, 0, 0};
    comm_total scatter{collective::reduce_scatter, axis, pass::backward, -1, -1, 0, 0};
    comm_total gather{collective::all_gather, axis, pass::backward, -1, -1, 0, 0};
    comm_total tail{collective::all_reduce, axis, pass::backward, -1, -1, 0, 0};
    auto chunks_of = [&](const lower::bucket& bk) { return bk.count / R; };
    auto count = [&](const lower::action& a) {
      if (a.kind == lower::act::reduce_bucket) {
        const lower::bucket& bk = T.buckets[idx(stage)][idx(a.index)];
        if (bk.axis != axis) return;
        const long long eb = a.half ? 2 : m_bytes, q = chunks_of(bk), rest = bk.count - q * R;
        if (!a.chunks) whole.bytes += bk.count * eb, ++whole.calls;
        if (a.chunks && q > 0) scatter.bytes += q * R * eb, ++scatter.calls;
        if (a.chunks && rest > 0) tail.bytes += rest * eb, ++tail.calls;
      }
      if (a.kind == lower::act::gather_bucket || a.kind == lower::act::gather_weights)
        for (int b = 0; b < T.num_buckets[idx(stage)]; ++b) {
          const lower::bucket& bk = T.buckets[idx(stage)][idx(b)];
          const bool mine = a.kind == lower::act::gather_bucket ? b == a.index : bk.taskgraph == a.index;
          if (!mine || bk.axis != axis || chunks_of(bk) == 0) continue;
          gather.bytes += chunks_of(bk) * R * m_bytes, ++gather.calls;
          if (a.kind == lower::act::gather_weights) gather.when = pass::forward;
        }
    };
    for (int i = 0; i < n; ++i) count(prog.at(stage, i));
    for (int i = 0; i < D::update.length[idx(stage)]; ++i) count(D::update.at(stage, i));
    for (const comm_total& c : {whole, scatter, gather, tail})
      if (c.calls > 0) add(c);
  }
  // the sums of the statistics layers keep (running batch-norm statistics), once per step
  // over the replicas
  if (dp != 1)
    for (int i = 0; i < n; ++i) {
      const lower::action& a = prog.at(stage, i);
      if (a.kind == lower::act::reduce_state)
        add(comm_total{collective::all_reduce, group_axis::data, pass::backward, a.index, a.part,
                       T.calls[idx(a.index)].needs.state_sums * s_bytes, 1});
    }
  // a tied tensor's copies on two stages: each device's reduced share of its copy (the
  // whole tensor, or ZeRO's chunk and tail) all-reduced with the other stage's device
  // at its place, once per step (a pipeline-axis pair; the row names the tied layer)
  if (D::tie_owner_stage != D::tie_user_stage && (stage == D::tie_owner_stage || stage == D::tie_user_stage)) {
    const lower::tensor_place& tp = T.params[idx(P::tie.user)][idx(P::tie.user_param)];
    const int R = (dp > 0 ? dp : 2) * P::reduction_devices(lower::detail::reduction_axis(tp.axis));
    const long long share = L::params.partitioned ? tp.size / R + tp.size % R : tp.size;
    add(comm_total{collective::all_reduce, group_axis::pipeline, pass::backward, P::tie.user,
                   P::layer_plans[idx(P::tie.user)].part, share * m_bytes, 1});
  }
}

// Every collective of a stage: at most one row per (kind, group, pass, layer, part).
template <class P>
struct comm_table {
  static constexpr int max_rows =
      4 * P::num_layers + max_layer_comms * P::num_layers + 4 * P::num_parts + 2 * P::buckets + 5;
  std::array<comm_total, static_cast<std::size_t>(max_rows)> rows{};
  int size = 0;
};

template <class P>
constexpr comm_table<P> communication_table(int stage, int dp, long long t_bytes, long long s_bytes, long long m_bytes) {
  comm_table<P> t;
  list_communication<P>(t, stage, dp, t_bytes, s_bytes, m_bytes);
  return t;
}

}  // namespace detail
}  // namespace strata
