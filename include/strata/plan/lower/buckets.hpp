#pragma once
// Lowering, second half: the parameter layout (each tensor's group and offset in its
// stage's flat arrays), the gradient buckets (EPL's communication.max_splits; under
// Zero<2/3> cut at TaskGraph boundaries too), the layer after whose final backward each
// bucket is complete, and the step lists with the buckets in place: after that layer's
// backward (B) step, or — zero-bubble schedules — in the part's W list, which runs the
// weight-gradient half of every split layer.
#include <array>
#include <cstddef>

#include "strata/plan/lower/tables.hpp"

namespace strata::lower::detail {

// Group 0 axis by axis (in this order), then group 1; each layer by layer.
inline constexpr std::array<group_axis, 6> reduction_axes{group_axis::data,       group_axis::depth_data,
                                                          group_axis::col_data,   group_axis::plane_data,
                                                          group_axis::context_data, group_axis::part_data};

// The axis a gradient is reduced over; a whole tensor under Replicate (part_data) and
// every tensor reduced only across replicas keep the two groups of 1D plans.
constexpr group_axis reduction_axis(group_axis g) {
  switch (g) {
    case group_axis::part_data:
    case group_axis::depth_data:
    case group_axis::col_data:
    case group_axis::plane_data:
    case group_axis::context_data: return g;
    default: return group_axis::data;
  }
}

template <class P, class Tables>
constexpr void lay_out_params(Tables& t) {
  for (const group_axis a : reduction_axes)
    for (int i = 0; i < P::num_layers; ++i) {
      const layer_plan& L = P::layer_plans[idx(i)];
      const int s = P::stage_of_part(L.part);
      for (int k = 0; k < L.desc.num_params; ++k) {
        const group_axis ax = reduction_axis(L.grad_group[idx(k)]);
        if (ax != a) continue;
        const int g = ax == group_axis::part_data ? 1 : 0;
        const long long size = L.local_params[idx(k)].numel();
        long long& total = t.group_elems[idx(s)][idx(g)];
        t.params[idx(i)][idx(k)] = tensor_place{g, total, size, ax};
        total += size;
      }
    }
}

// The lowest and highest+1 element of group g on stage s among the tensors `take` accepts.
template <class P, class Tables, class Take>
constexpr std::array<long long, 2> range_of(const Tables& t, int s, int g, Take&& take) {
  long long lo = t.group_elems[idx(s)][idx(g)], hi = 0;
  for (int i = 0; i < P::num_layers; ++i) {
    if (P::stage_of_part(P::layer_plans[idx(i)].part) != s) continue;
    for (int k = 0; k < P::layer_plans[idx(i)].desc.num_params; ++k) {
      const tensor_place& tp = t.params[idx(i)][idx(k)];
      if (tp.group != g || tp.size == 0 || !take(i, tp)) continue;
      lo = tp.offset < lo ? tp.offset : lo;
      hi = tp.offset + tp.size > hi ? tp.offset + tp.size : hi;
    }
  }
  return {lo, hi};
}

// Where a bucket starting at element `off` of group g on stage s ends, `stop` unless a
// tied tensor's copy (plan/sharding.hpp's tie_info) intervenes: each copy is one bucket of
// its own, so that both copies are chunked alike under ZeRO and their reduced gradients
// can be summed chunk by chunk.
template <class P, class Tables>
constexpr long long bucket_stop(const Tables& t, int s, int g, long long off, long long stop) {
  if (!P::tie.any()) return stop;
  const std::array<std::array<int, 2>, 2> copies{{{P::tie.owner, P::tie.owner_param}, {P::tie.user, P::tie.user_param}}};
  for (const auto& [i, k] : copies) {
    if (P::stage_of_part(P::layer_plans[idx(i)].part) != s) continue;
    const tensor_place& tp = t.params[idx(i)][idx(k)];
    if (tp.group != g || tp.size == 0) continue;
    if (off >= tp.offset && off < tp.offset + tp.size) return tp.offset + tp.size;  // the copy, whole
    if (tp.offset > off && tp.offset < stop) stop = tp.offset;
  }
  return stop;
}

// Cuts each stage's groups into buckets; `final_bwd[part]` is the position of the part's
// final backward (B, or W when split) in its stage's program.
template <class P, class Tables>
constexpr void cut_buckets(Tables& t, const std::array<int, static_cast<std::size_t>(P::num_parts)>& final_bwd) {
  for (int s = 0; s < P::stages; ++s) {
    auto add = [&](bucket b) { t.buckets[idx(s)][idx(t.num_buckets[idx(s)]++)] = b; };
    for (int g = 0; g < 2; ++g) {
      const long long total = t.group_elems[idx(s)][idx(g)];
      if (total == 0) continue;
      const long long chunk = (total + P::buckets - 1) / P::buckets;
      if constexpr (P::zero >= 2) {
        // each TaskGraph's range of the group (its layers' tensors lie together), cut
        for (int tg = 0; tg < P::num_taskgraphs; ++tg) {
          const auto [lo, hi] =
              range_of<P>(t, s, g, [&](int i, const tensor_place&) { return P::layer_plans[idx(i)].taskgraph == tg; });
          for (long long off = lo; off < hi;) {
            const long long stop = bucket_stop<P>(t, s, g, off, off + chunk < hi ? off + chunk : hi);
            add(bucket{g, g == 1 ? group_axis::part_data : P::shard_axis, off, stop - off, -1, tg});
            off = stop;
          }
        }
      } else {
        // the group's chunks, cut again where the reduction axis changes
        for (const group_axis a : reduction_axes) {
          const auto [lo, hi] = range_of<P>(t, s, g, [&](int, const tensor_place& tp) { return tp.axis == a; });
          for (long long off = lo; off < hi;) {
            const long long end = (off / chunk + 1) * chunk;
            const long long stop = bucket_stop<P>(t, s, g, off, end < hi ? end : hi);
            add(bucket{g, a, off, stop - off, -1, -1});
            off = stop;
          }
        }
      }
    }
    // The layer after whose final backward a bucket's gradients are complete: among the
    // parts with tensors in the bucket, the one whose final backward comes last in the
    // stage's program, and within it the lowest such layer.
    std::array<int, idx(Tables::max_buckets)> best_pos{};
    for (auto& v : best_pos) v = -1;
    for (int i = 0; i < P::num_layers; ++i) {
      const layer_plan& L = P::layer_plans[idx(i)];
      if (P::stage_of_part(L.part) != s) continue;
      const int pos = final_bwd[idx(L.part)];
      for (int k = 0; k < L.desc.num_params; ++k) {
        const tensor_place& tp = t.params[idx(i)][idx(k)];
        if (tp.size == 0) continue;
        for (int j = 0; j < t.num_buckets[idx(s)]; ++j) {
          bucket& b = t.buckets[idx(s)][idx(j)];
          if (b.group != tp.group || b.offset >= tp.offset + tp.size || tp.offset >= b.offset + b.count) continue;
          int& bp = best_pos[idx(j)];
          if (pos > bp || (pos == bp && i < b.layer)) bp = pos, b.layer = i;
        }
      }
    }
  }
}

// The final step lists: each part's forward list as laid out, its backward list with
// each bucket right after its layer's backward step (several on one layer in descending
// bucket order) — or, zero-bubble, without buckets — and its W list: the W half of every
// split layer in backward order, with the buckets where the backward list would have them.
template <class P, class Tables>
constexpr void place_buckets(Tables& t) {
  const auto steps = t.steps;  // the lists as laid out, before the buckets
  const auto parts = t.parts;
  t.num_steps = 0;
  auto push = [&](act k, int index) { t.steps[idx(t.num_steps++)] = step{k, index}; };
  for (int q = 0; q < P::num_parts; ++q) {
    part_plan& r = t.parts[idx(q)];
    const part_plan& o = parts[idx(q)];
    const int s = P::stage_of_part(q);
    auto buckets_after = [&](int layer) {
      for (int b = t.num_buckets[idx(s)] - 1; b >= 0; --b)
        if (t.buckets[idx(s)][idx(b)].layer == layer) push(act::reduce_bucket, b);
    };
    auto backward_of = [&](act k) { return k == act::backward || k == act::backward_data; };
    r.fwd_begin = t.num_steps;
    for (int k = o.fwd_begin; k < o.fwd_end; ++k) t.steps[idx(t.num_steps++)] = steps[idx(k)];
    r.fwd_end = r.bwd_begin = t.num_steps;
    for (int k = o.bwd_begin; k < o.bwd_end; ++k) {
      const step st = steps[idx(k)];
      t.steps[idx(t.num_steps++)] = st;
      if (!P::split_backward && backward_of(st.kind)) buckets_after(st.index);
    }
    r.bwd_end = r.wgt_begin = t.num_steps;
    if (P::split_backward)
      for (int k = o.bwd_begin; k < o.bwd_end; ++k) {
        const step st = steps[idx(k)];
        // W reads the input again: a row split gathered again before B is gathered before W too
        if (st.kind == act::convert && t.convs[idx(st.index)].regather &&
            !t.calls[idx(t.convs[idx(st.index)].layer)].dy_keep.empty())
          push(act::convert, st.index);
        if (st.kind == act::backward_data) push(act::backward_weights, st.index);
        if (backward_of(st.kind)) buckets_after(st.index);
      }
    r.wgt_end = t.num_steps;
  }
}

}  // namespace strata::lower::detail
