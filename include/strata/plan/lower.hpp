#pragma once
// Lowering: a plan turned, once and at compile time, into exactly what runs.
//  * per stage, the verified action list: the schedule with each micro-batch's buffer
//    slots and each part's final backward marked (sched::assign_slots);
//  * per pipeline part, the forward and backward step lists: loading the input,
//    layout conversions (with the collective the sharding pass derived), layer calls,
//    and the gradient buckets that go out during the final backward;
//  * the static buffer plan: every activation, stash, message, staging and scratch
//    buffer with its pool, offset and exact size, local rows included;
//  * the parameter layout (each tensor's group and offset) and the gradient buckets.
// The executor interprets these and allocates exactly these; the plan's analyses
// (memory, communication) read them. Nothing is decided again at run time.
#include <array>
#include <cstddef>
#include <string_view>

#include "strata/core/sbp.hpp"
#include "strata/plan/schedule.hpp"
#include "strata/plan/sharding.hpp"

namespace strata::lower {

// Where a buffer lives. act/exit/gout/gin repeat once per slot of their part (see
// sched::assign_slots); work is one region per stage, reused by every layer call.
enum class pool : unsigned char { none, act, exit, gout, gin, work };

// Element kind of a buffer: the compute type T, the statistics type stat_t<T>, or int32.
enum class kind : unsigned char { values, stats, ids };

struct buf {
  pool where = pool::none;
  kind of = kind::values;
  int part = -1;        // the part whose slot holds it (per-slot pools)
  long long off = 0;    // elements from the start of the slot's (or the work region's) sub-arena of `of`
  long long elems = 0;
  constexpr bool empty() const { return where == pool::none; }
  friend constexpr bool operator==(const buf&, const buf&) = default;
};

// One layer's call, as the executor makes it.
struct layer_call {
  local_dims dims{};
  buffer_needs needs{};
  buf x, y;                                  // forward: input (its layout), output
  buf stash_values, stash_stats, stash_ids;  // kept from forward for backward (act pool)
  buf scratch_values, scratch_stats;         // inside one call (work)
  buf dy, dx;                                // backward: output and input gradients (dx empty: not computed)
  buf dy_keep, keep;                         // split backward: dy kept for W (dy itself when it is per-slot),
                                             // and what B leaves W (act pool)
  buf skip, skip_grad;                       // residuals: the skip (ResidualEnd reads it) and its
                                             // gradient (ResidualEnd writes it, ResidualBegin reads it)
  bool reads_ids = false;                    // the model's token ids (an Embedding first)
};

// One layout conversion of a whole tensor of rows × cols (before any split).
struct conversion {
  int layer = -1;
  pass when = pass::forward;
  sbp from = sbp::broadcast, to = sbp::broadcast;
  collective coll = collective::none;
  long long rows = 0, cols = 0;
  buf src, dst, staging;  // src == dst: in place (an all-reduce)
  long long comm_elems = 0;  // the collective's size, by comm_desc's rule
};

// recompute: a layer's forward run again in the backward, from its checkpointed region's
// kept input (into the same buffers, so what backward reads is what forward wrote).
enum class step_kind : unsigned char { load, convert, forward, backward, bucket, recompute };
struct step {
  step_kind kind = step_kind::forward;
  int index = 0;  // layer, conversion or bucket
};
constexpr std::string_view to_string(step_kind k) {
  switch (k) {
    case step_kind::load: return "load";
    case step_kind::convert: return "convert";
    case step_kind::forward: return "forward";
    case step_kind::backward: return "backward";
    case step_kind::bucket: return "reduce-bucket";
    case step_kind::recompute: return "recompute";
  }
  return "?";
}

struct part_plan {
  int first = -1, last = -1, stage = 0;
  int fwd_begin = 0, fwd_end = 0, bwd_begin = 0, bwd_end = 0;  // ranges of `steps`
  buf entry;  // the input as it arrives (act); empty when the first layer reads token ids
  buf exit;   // the output handed on: the exit pool, or the next part's entry (one stage)
  buf gout;   // the output's gradient (gout pool); empty for the part that ends with the loss
  buf gin;    // the input's gradient handed back: the gin pool, or the previous part's gout
  // one slot of each per-slot pool, in elements
  long long act_values = 0, act_stats = 0, act_ids = 0, exit_values = 0, gout_values = 0, gin_values = 0;
};

// A parameter tensor's place in its stage's flat parameter/gradient arrays: group 0 is
// reduced over the data-parallel group, group 1 over the part's devices and the data group.
// `axis` is the devices its gradient is reduced over: group 1 is always part_data; group
// 0 holds data, and under 2D/2.5D/3D also depth_data, col_data and plane_data tensors, laid
// out axis by axis so that no bucket mixes two axes.
struct tensor_place {
  int group = 0;
  long long offset = 0, size = 0;
  group_axis axis = group_axis::data;
};

struct bucket {
  int group = 0;
  group_axis axis = group_axis::data;
  long long offset = 0, count = 0;
  int layer = -1;      // issued after this layer's final backward (every backward under Zero<2/3>)
  int taskgraph = -1;  // Zero<2/3>: the one TaskGraph whose tensors it holds
};

// Work-region layout (per stage): two activation/gradient buffers used in turn, the
// conversion staging, the layers' scratch, and the activations of one recomputed region
// (every region of the stage reuses it: a region's forward is run again right before
// its backward, and nothing else runs in between).
struct work_layout {
  long long ping = 0, staging = 0, scratch_values = 0, scratch_stats = 0;
  long long recompute_values = 0, recompute_stats = 0, recompute_ids = 0;
  constexpr long long values() const { return 2 * ping + staging + scratch_values + recompute_values; }
  constexpr long long stats() const { return scratch_stats + recompute_stats; }
  constexpr long long ids() const { return recompute_ids; }
};

namespace detail {
constexpr long long layout_rows(long long full_rows, sbp l, int n, const strata::detail::mesh_factors& m) {
  return l == sbp::split_batch ? full_rows / n : l == sbp::block ? full_rows / m.rows : full_rows;
}
constexpr long long layout_cols(long long cols, sbp l, int n, const strata::detail::mesh_factors& m) {
  return l == sbp::split_feature ? cols / n : l == sbp::block ? cols / m.features : cols;
}
constexpr long long max2(long long a, long long b) { return a > b ? a : b; }
}  // namespace detail

template <class P>
struct lowered {
  static constexpr int NL = P::num_layers, NP = P::num_parts, NS = P::stages;
  // Zero<2/3> cut buckets at TaskGraph boundaries too (a TaskGraph's gradients and
  // weights come and go together)
  // (plus one per extra reduction axis of the N-D modes, at whose boundaries buckets are cut)
  static constexpr int max_buckets = 2 * (P::buckets + (P::zero >= 2 ? P::num_taskgraphs : 0)) + 3;
  static constexpr int max_steps = NP + 7 * NL + NS * max_buckets + 1;
  static constexpr std::size_t idx(int i) { return static_cast<std::size_t>(i); }

  // ---- the programs -----------------------------------------------------------------
  static constexpr auto train = P::lowered_program;
  static constexpr auto eval = sched::assign_slots<NP, 1>(sched::forward_only<NS, P::chunks, P::v_shape>());

  // ---- layers, parts and buffers -----------------------------------------------------
  struct layer_tables {
    std::array<layer_call, idx(NL)> calls{};
    std::array<conversion, idx(2 * NL)> convs{};
    int num_convs = 0;
    std::array<step, idx(max_steps)> steps{};
    int num_steps = 0;
    std::array<part_plan, idx(NP)> parts{};
    std::array<work_layout, idx(NS)> work{};
    std::array<std::array<tensor_place, max_layer_params>, idx(NL)> params{};
    std::array<std::array<long long, 2>, idx(NS)> group_elems{};
    std::array<std::array<bucket, idx(max_buckets)>, idx(NS)> buckets{};
    std::array<int, idx(NS)> num_buckets{};
  };

  static constexpr layer_tables build() {
    layer_tables t{};
    const auto& lp = P::layer_plans;
    const int n = P::part_devices;
    const long long mb = P::micro_batch;
    const auto need_dx = strata::detail::input_grads_needed(lp);
    auto full_rows = [&](const shape_t& s) { return mb * (s.numel() / (s.last() > 0 ? s.last() : 1)); };
    auto rows_of = [&](const shape_t& s, sbp l) { return detail::layout_rows(full_rows(s), l, n, P::mesh); };
    auto cols_of = [&](const shape_t& s, sbp l) { return detail::layout_cols(s.last(), l, n, P::mesh); };

    // Local dimensions and memory of every layer.
    for (int i = 0; i < NL; ++i) {
      const layer_plan& L = lp[idx(i)];
      layer_call& c = t.calls[idx(i)];
      c.dims.rows = rows_of(L.in, L.in_layout);
      c.dims.in_cols = cols_of(L.in, L.in_layout);
      const bool loss = L.desc.role == layer_role::loss;
      c.dims.out_rows = loss ? 0 : rows_of(L.out, L.out_layout);
      c.dims.out_cols = loss ? 0 : cols_of(L.out, L.out_layout);
      c.dims.in = L.in;
      c.dims.out = L.out;
      c.dims.n = n;
      c.dims.sig = L.sig;
      c.dims.q = L.in_layout == sbp::block ? P::mesh.features : 0;
      c.needs = L.desc.memory(c.dims);
      c.reads_ids = i == 0 && L.desc.role == layer_role::embedding;
    }

    for (int p = 0; p < NP; ++p) {
      part_plan& pp = t.parts[idx(p)];
      pp.stage = P::stage_of_part(p);
      for (int i = 0; i < NL; ++i)
        if (lp[idx(i)].part == p) {
          if (pp.first < 0) pp.first = i;
          pp.last = i;
        }
    }

    for (int p = 0; p < NP; ++p) {
      part_plan& pp = t.parts[idx(p)];
      work_layout& w = t.work[idx(pp.stage)];
      if (pp.first < 0) continue;
      long long act_v = 0, act_s = 0, act_i = 0;
      auto act = [&](kind k, long long e) {
        long long& o = k == kind::values ? act_v : k == kind::stats ? act_s : act_i;
        const buf b{pool::act, k, p, o, e};
        o += e;
        return b;
      };
      // Work buffers: two used in turn (a transient never shares one with the other
      // operand of its call), the conversion staging, the scratch. Offsets are codes
      // until the stage's sizes are known (fix, below).
      auto ping = [&](int which, long long e) {
        w.ping = detail::max2(w.ping, e);
        return buf{pool::work, kind::values, -1, which == 0 ? ping0 : ping1, e};
      };
      auto other = [](const buf& b) { return b.where == pool::work && b.off == ping0 ? 1 : 0; };
      auto conv_of = [&](int i, pass when, sbp from, sbp to, const shape_t& s, const buf& src, const buf& dst) {
        conversion& c = t.convs[idx(t.num_convs)];
        c.layer = i;
        c.when = when;
        c.from = from;
        c.to = to;
        c.coll = strata::detail::convert(from, to);
        c.rows = full_rows(s);
        c.cols = s.last();
        c.src = src;
        c.dst = dst;
        const long long whole = c.rows * c.cols;
        c.comm_elems = strata::detail::conversion_elems(c.coll, whole, n);
        // a feature split is packed into (or unpacked from) contiguous per-device blocks
        const bool packs = (from == sbp::split_feature && to != sbp::split_feature) ||
                           (to == sbp::split_feature && from != sbp::split_feature && from != sbp::broadcast);
        if (packs) {
          const long long e = from == sbp::split_batch || to == sbp::split_batch ? whole / n : whole;
          w.staging = detail::max2(w.staging, e);
          c.staging = buf{pool::work, kind::values, -1, staging_code, e};
        }
        return t.num_convs++;
      };
      auto push = [&](step_kind k, int index) { t.steps[idx(t.num_steps++)] = step{k, index}; };
      auto converts = [&](int i) { return lp[idx(i)].arrives != lp[idx(i)].in_layout; };
      auto in_place = [&](sbp from, sbp to) { return strata::detail::convert(from, to) == collective::all_reduce; };
      const bool has_next = p + 1 < NP, has_prev = p > 0;
      const bool next_here = has_next && P::stage_of_part(p + 1) == pp.stage;
      const bool prev_here = has_prev && P::stage_of_part(p - 1) == pp.stage;
      // A view aliases its input, except at the part's edges, where its output (or
      // input gradient) is a message: then it copies.
      auto aliases = [&](int i, const layer_call& c) {
        return c.needs.view && !(i == pp.last && has_next);
      };

      // Recomputed regions (P::recompute_region): a region's input is kept in the act
      // slot; everything its layers write in forward goes to the stage's recompute
      // buffers (rc), written again when the backward recomputes the region.
      auto region = [&](int i) { return i < pp.first || i > pp.last ? -1 : P::recompute_region[idx(i)]; };
      auto region_first = [&](int i) { return region(i) >= 0 && region(i - 1) != region(i); };
      auto region_last = [&](int i) { return region(i) >= 0 && region(i + 1) != region(i); };
      long long rc_v = 0, rc_s = 0, rc_i = 0;
      auto rc = [&](kind k, long long e) {
        long long& o = k == kind::values ? rc_v : k == kind::stats ? rc_s : rc_i;
        long long& top = k == kind::values ? w.recompute_values : k == kind::stats ? w.recompute_stats : w.recompute_ids;
        const buf b{pool::work, k, -1, recompute_code - o, e};
        o += e;
        top = detail::max2(top, o);
        return b;
      };
      // where layer i keeps something for its backward
      auto keep = [&](int i, kind k, long long e) { return region(i) >= 0 ? rc(k, e) : act(k, e); };
      std::array<int, idx(NL)> fconv{};  // each layer's forward conversion, for the recompute

      // Which layer inputs must survive until backward: kept inputs, the input of a
      // view whose output (the same buffer) is kept, and a recomputed region's input.
      std::array<bool, idx(NL)> persist{};
      for (int i = pp.last; i >= pp.first; --i) {
        const layer_call& c = t.calls[idx(i)];
        persist[idx(i)] = c.needs.keep_input || region_first(i) ||
                          (aliases(i, c) && i < pp.last && !converts(i + 1) && persist[idx(i + 1)]);
      }

      // ---- forward -------------------------------------------------------------------
      std::array<int, idx(NL) + 1> open{};  // residuals begun and not yet ended
      int depth = 0;
      pp.fwd_begin = t.num_steps;
      const layer_plan& F = lp[idx(pp.first)];
      const long long entry_elems = rows_of(F.in, F.arrives) * cols_of(F.in, F.arrives);
      if (!t.calls[idx(pp.first)].reads_ids) pp.entry = act(kind::values, entry_elems);
      if (p == 0 && !pp.entry.empty()) push(step_kind::load, pp.first);
      buf src = pp.entry;  // what arrives at layer i
      for (int i = pp.first; i <= pp.last; ++i) {
        const layer_plan& L = lp[idx(i)];
        layer_call& c = t.calls[idx(i)];
        const long long x_elems = c.dims.rows * c.dims.in_cols;
        if (region_first(i)) rc_v = rc_s = rc_i = 0;  // regions reuse the recompute buffers
        const bool inside = region(i) >= 0 && !region_first(i);
        fconv[idx(i)] = -1;
        if (converts(i) && !in_place(L.arrives, L.in_layout)) {
          const buf dst = inside ? rc(kind::values, x_elems)
                          : persist[idx(i)] ? act(kind::values, x_elems) : ping(other(src), x_elems);
          fconv[idx(i)] = conv_of(i, pass::forward, L.arrives, L.in_layout, L.in, src, dst);
          push(step_kind::convert, fconv[idx(i)]);
          c.x = dst;
        } else {
          if (converts(i)) {
            fconv[idx(i)] = conv_of(i, pass::forward, L.arrives, L.in_layout, L.in, src, src);
            push(step_kind::convert, fconv[idx(i)]);
          }
          c.x = src;
        }
        if (c.needs.stash_values) c.stash_values = keep(i, kind::values, c.needs.stash_values);
        if (L.desc.role == layer_role::residual_begin) open[idx(depth++)] = i;
        if (L.desc.role == layer_role::residual_end && depth > 0) {
          const int b = open[idx(--depth)];
          c.skip = t.calls[idx(b)].x;  // kept: ResidualBegin keeps its input
          t.calls[idx(b)].skip_grad = c.stash_values;
        }
        if (c.needs.stash_stats) c.stash_stats = keep(i, kind::stats, c.needs.stash_stats);
        if (c.needs.stash_ids) c.stash_ids = keep(i, kind::ids, c.needs.stash_ids);
        if (c.needs.scratch_values) {
          w.scratch_values = detail::max2(w.scratch_values, c.needs.scratch_values);
          c.scratch_values = buf{pool::work, kind::values, -1, scratch_code, c.needs.scratch_values};
        }
        if (c.needs.scratch_stats) {
          w.scratch_stats = detail::max2(w.scratch_stats, c.needs.scratch_stats);
          c.scratch_stats = buf{pool::work, kind::stats, -1, 0, c.needs.scratch_stats};
        }
        const long long y_elems = c.dims.out_rows * c.dims.out_cols;
        if (aliases(i, c)) {
          c.y = c.x;
        } else if (L.desc.role == layer_role::loss) {
          c.y = buf{};
        } else if (i == pp.last) {
          // the output is a message: the exit pool, or (one stage) the next part's
          // entry, which is filled in once that part is laid out
          pp.exit = next_here ? buf{} : buf{pool::exit, kind::values, p, 0, y_elems};
          c.y = pp.exit;
        } else {
          const bool direct = !converts(i + 1) || in_place(lp[idx(i + 1)].arrives, lp[idx(i + 1)].in_layout);
          // inside a region nothing goes to the ping buffers: the recompute must not
          // overwrite the gradient that its backward is about to read
          if (region(i) >= 0 && (region(i + 1) == region(i) || !(direct && persist[idx(i + 1)])))
            c.y = rc(kind::values, y_elems);
          else c.y = direct && persist[idx(i + 1)] ? act(kind::values, y_elems) : ping(other(c.x), y_elems);
        }
        push(step_kind::forward, i);
        src = c.y;
      }
      pp.fwd_end = t.num_steps;
      pp.act_values = act_v;
      pp.act_stats = act_s;
      pp.act_ids = act_i;
      pp.exit_values = pp.exit.elems;

      // ---- backward -------------------------------------------------------------------
      pp.bwd_begin = t.num_steps;
      const layer_call& Z = t.calls[idx(pp.last)];
      if (lp[idx(pp.last)].desc.role != layer_role::loss)
        pp.gout = buf{pool::gout, kind::values, p, 0, Z.dims.out_rows * Z.dims.out_cols};
      pp.gout_values = pp.gout.elems;
      if (has_prev) {
        pp.gin = prev_here ? buf{pool::gout, kind::values, p - 1, 0, entry_elems}
                           : buf{pool::gin, kind::values, p, 0, entry_elems};
        pp.gin_values = prev_here ? 0 : entry_elems;
      }
      buf dy = pp.gout;
      for (int i = pp.last; i >= pp.first; --i) {
        const layer_plan& L = lp[idx(i)];
        layer_call& c = t.calls[idx(i)];
        if (region_last(i)) {  // run the region's forward again from its kept input
          int f = i;
          while (!region_first(f)) --f;
          for (int j = f; j <= i; ++j) {
            if (j != f && fconv[idx(j)] >= 0) push(step_kind::convert, fconv[idx(j)]);
            push(step_kind::recompute, j);
          }
        }
        c.dy = dy;
        if (P::split_backward && c.needs.weight_pass && L.desc.num_params > 0) {
          // W runs after later work has reused the ping buffers: keep dy in the slot
          const bool per_slot = dy.where == pool::gout && dy.part == p;
          c.dy_keep = per_slot ? dy : act(kind::values, c.dims.out_rows * c.dims.out_cols);
          if (c.needs.weight_keep > 0) c.keep = act(kind::values, c.needs.weight_keep);
        }
        const bool want_dx = need_dx[idx(i)];
        const sbp g_in = strata::detail::input_grad_layout(L), g_out = strata::detail::grad_of(L.arrives);
        const bool conv = want_dx && g_in != g_out;
        const bool conv_in_place = conv && in_place(g_in, g_out);
        // a view's gradient is its output's, with no step (unless its backward runs a
        // kernel); ResidualEnd hands dy on but runs a step to keep a copy for the skip
        const bool alias = c.needs.view && !c.needs.backward_kernel && !(i == pp.first && has_prev);
        const bool end = L.desc.role == layer_role::residual_end;
        if (!want_dx) c.dx = buf{};
        else if (alias || end) c.dx = c.dy;
        else if (i == pp.first && (!conv || conv_in_place)) c.dx = pp.gin;
        else c.dx = ping(other(dy), c.dims.rows * c.dims.in_cols);
        if (!alias) push(step_kind::backward, i);
        if (conv) {
          const buf dst = conv_in_place ? c.dx
                          : i == pp.first ? pp.gin
                                          : ping(other(c.dx), rows_of(L.in, L.arrives) * cols_of(L.in, L.arrives));
          push(step_kind::convert, conv_of(i, pass::backward, g_in, g_out, L.in, c.dx, dst));
          dy = dst;
        } else {
          dy = c.dx;
        }
        if (!want_dx) break;
      }
      pp.bwd_end = t.num_steps;
      pp.act_values = act_v;  // with what the backward keeps for W
    }

    // One stage: a part's output is the next part's entry (its act slot, chosen by the
    // schedule's out_slot); the last layer writes there directly.
    for (int p = 0; p + 1 < NP; ++p) {
      part_plan& pp = t.parts[idx(p)];
      if (pp.first < 0 || P::stage_of_part(p + 1) != pp.stage) continue;
      pp.exit = t.parts[idx(p + 1)].entry;
      t.calls[idx(pp.last)].y = pp.exit;
    }

    // Work offsets: [ping 0 | ping 1 | staging | scratch values], stats: [scratch].
    for (int i = 0; i < NL; ++i) {
      layer_call& c = t.calls[idx(i)];
      const work_layout& w = t.work[idx(t.parts[idx(lp[idx(i)].part)].stage)];
      for (buf* b : {&c.x, &c.y, &c.dy, &c.dx, &c.scratch_values, &c.scratch_stats, &c.skip, &c.skip_grad,
                     &c.stash_values, &c.stash_stats, &c.stash_ids})
        if (b->where == pool::work) b->off = fix(*b, w);
    }
    for (int k = 0; k < t.num_convs; ++k) {
      conversion& c = t.convs[idx(k)];
      const work_layout& w = t.work[idx(t.parts[idx(lp[idx(c.layer)].part)].stage)];
      for (buf* b : {&c.src, &c.dst, &c.staging})
        if (b->where == pool::work) b->off = fix(*b, w);
    }

    // ---- parameters and gradient buckets -----------------------------------------------
    // group 0 axis by axis (in the enum's order), then group 1; each layer by layer
    constexpr std::array<group_axis, 5> axes{group_axis::data, group_axis::depth_data, group_axis::col_data,
                                             group_axis::plane_data, group_axis::part_data};
    for (const group_axis a : axes)
      for (int i = 0; i < NL; ++i) {
        const layer_plan& L = lp[idx(i)];
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
    std::array<int, idx(NP)> fb{};  // each part's final backward in its stage's program
    for (int q = 0; q < NP; ++q) fb[idx(q)] = final_backward(P::stage_of_part(q), q);
    for (int s = 0; s < NS; ++s) {
      std::array<long long, 2> chunk{};
      for (int g = 0; g < 2; ++g) {
        const long long total = t.group_elems[idx(s)][idx(g)];
        if (total == 0) continue;
        chunk[idx(g)] = (total + P::buckets - 1) / P::buckets;
        if constexpr (P::zero >= 2) {
          // each TaskGraph's range of the group (its layers' tensors lie together), cut
          for (int tg = 0; tg < P::num_taskgraphs; ++tg) {
            long long lo = total, hi = 0;
            for (int i = 0; i < NL; ++i) {
              if (lp[idx(i)].taskgraph != tg || P::stage_of_part(lp[idx(i)].part) != s) continue;
              for (int k = 0; k < lp[idx(i)].desc.num_params; ++k) {
                const tensor_place& tp = t.params[idx(i)][idx(k)];
                if (tp.group != g || tp.size == 0) continue;
                lo = tp.offset < lo ? tp.offset : lo;
                hi = tp.offset + tp.size > hi ? tp.offset + tp.size : hi;
              }
            }
            for (long long off = lo; off < hi; off += chunk[idx(g)])
              t.buckets[idx(s)][idx(t.num_buckets[idx(s)]++)] =
                  bucket{g, g == 1 ? group_axis::part_data : group_axis::data, off, chunk[idx(g)] < hi - off ? chunk[idx(g)] : hi - off, -1, tg};
          }
        } else {
          // the group's chunks, cut again where the reduction axis changes
          for (const group_axis a : axes) {
            long long lo = total, hi = 0;
            for (int i = 0; i < NL; ++i)
              for (int k = 0; k < lp[idx(i)].desc.num_params; ++k) {
                const tensor_place& tp = t.params[idx(i)][idx(k)];
                if (tp.group != g || tp.axis != a || tp.size == 0 || P::stage_of_part(lp[idx(i)].part) != s) continue;
                lo = tp.offset < lo ? tp.offset : lo;
                hi = tp.offset + tp.size > hi ? tp.offset + tp.size : hi;
              }
            for (long long off = lo; off < hi;) {
              const long long end = (off / chunk[idx(g)] + 1) * chunk[idx(g)];
              const long long stop = end < hi ? end : hi;
              t.buckets[idx(s)][idx(t.num_buckets[idx(s)]++)] = bucket{g, a, off, stop - off, -1, -1};
              off = stop;
            }
          }
        }
      }
      // The layer after whose final backward a bucket's gradients are complete: among the
      // parts with tensors in the bucket, the one whose final backward comes last in the
      // stage's program, and within it the lowest such layer.
      std::array<int, idx(max_buckets)> best_pos{};
      for (auto& v : best_pos) v = -1;
      for (int i = 0; i < NL; ++i) {
        const layer_plan& L = lp[idx(i)];
        if (P::stage_of_part(L.part) != s) continue;
        const int pos = fb[idx(L.part)];
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
    // Insert each bucket after its layer's backward step (the executor runs bucket steps
    // during a part's final backward only).
    insert_buckets(t);
    return t;
  }

  // The axis a gradient is reduced over; a whole tensor under Replicate (part_data) and
  // every tensor reduced only across replicas keep the two groups of 1D plans.
  static constexpr group_axis reduction_axis(group_axis g) {
    switch (g) {
      case group_axis::part_data:
      case group_axis::depth_data:
      case group_axis::col_data:
      case group_axis::plane_data: return g;
      default: return group_axis::data;
    }
  }

  // Work offsets are codes until the stage's sizes are known: values are [ping 0 | ping 1 |
  // staging | scratch | recompute], stats [scratch | recompute], ids [recompute]; a
  // recompute buffer at offset o within its section is coded recompute_code − o.
  static constexpr long long ping0 = -1, ping1 = -2, staging_code = -3, scratch_code = -4, recompute_code = -16;
  static constexpr long long fix(const buf& b, const work_layout& w) {
    const long long code = b.off;
    if (code <= recompute_code) {
      const long long o = recompute_code - code;
      if (b.of == kind::values) return 2 * w.ping + w.staging + w.scratch_values + o;
      if (b.of == kind::stats) return w.scratch_stats + o;
      return o;
    }
    switch (code) {
      case ping0: return 0;
      case ping1: return w.ping;
      case staging_code: return 2 * w.ping;
      case scratch_code: return 2 * w.ping + w.staging;
    }
    return code;  // stats scratch: 0
  }

  static constexpr int final_backward(int s, int part) {
    int pos = -1;
    for (int i = 0; i < train.prog.length[idx(s)]; ++i) {
      const sched::instr& x = train.prog.at(s, i);
      // with split backwards the weight gradients are complete after the final W
      const sched::op last = train.prog.split_backward ? sched::op::weight : sched::op::backward;
      if (x.kind == last && P::part_of(s, x.chunk) == part) pos = i;
    }
    return pos;
  }
  // Each bucket's step goes right after its layer's backward step (the executor runs
  // bucket steps during a part's final backward only); several on one layer go in
  // descending bucket order. One pass over the step list: parts lie in it in order,
  // each its forward steps then its backward steps.
  static constexpr void insert_buckets(layer_tables& t) {
    // in place, from the back: the list only grows, so no step is overwritten unread
    int added = 0;
    for (int s = 0; s < NS; ++s)
      for (int b = 0; b < t.num_buckets[idx(s)]; ++b) added += t.buckets[idx(s)][idx(b)].layer >= 0;
    int w = t.num_steps + added;
    t.num_steps = w;
    for (int q = NP - 1; q >= 0; --q) {
      part_plan& r = t.parts[idx(q)];
      const int s = P::stage_of_part(q);
      const int fb = r.fwd_begin, fe = r.fwd_end, bb = r.bwd_begin, be = r.bwd_end;
      r.bwd_end = w;
      for (int k = be - 1; k >= bb; --k) {
        const step st = t.steps[idx(k)];
        if (st.kind == step_kind::backward)
          for (int b = 0; b < t.num_buckets[idx(s)]; ++b)
            if (t.buckets[idx(s)][idx(b)].layer == st.index) t.steps[idx(--w)] = step{step_kind::bucket, b};
        t.steps[idx(--w)] = st;
      }
      r.bwd_begin = w;
      r.fwd_end = w;
      for (int k = fe - 1; k >= fb; --k) t.steps[idx(--w)] = t.steps[idx(k)];
      r.fwd_begin = w;
    }
  }

  static constexpr layer_tables tables = build();

  // ---- sizes --------------------------------------------------------------------------
  static constexpr int slots(sched::pool_kind k, int part) { return train.count(k, part); }

  // Bytes of the activation buffers of one stage for compute type T and statistics S.
  static constexpr long long arena_bytes(int stage, long long t_bytes, long long s_bytes) {
    long long b = 0;
    for (int p = 0; p < NP; ++p) {
      const part_plan& pp = tables.parts[idx(p)];
      if (pp.stage != stage) continue;
      b += slots(sched::pool_kind::act, p) * (pp.act_values * t_bytes + pp.act_stats * s_bytes + pp.act_ids * 4);
      b += slots(sched::pool_kind::exit, p) * pp.exit_values * t_bytes;
      b += slots(sched::pool_kind::gout, p) * pp.gout_values * t_bytes;
      b += slots(sched::pool_kind::gin, p) * pp.gin_values * t_bytes;
    }
    const work_layout& w = tables.work[idx(stage)];
    return b + w.values() * t_bytes + w.stats() * s_bytes + w.ids() * 4;
  }
  // The stash: what one micro-batch keeps in its act slot, and the stage's peak.
  static constexpr long long stash_bytes(int part, long long t_bytes, long long s_bytes) {
    const part_plan& pp = tables.parts[idx(part)];
    return pp.act_values * t_bytes + pp.act_stats * s_bytes + pp.act_ids * 4;
  }
  static constexpr long long peak_stash_bytes(int stage, long long t_bytes, long long s_bytes) {
    long long b = 0;
    for (int p = 0; p < NP; ++p)
      if (tables.parts[idx(p)].stage == stage) b += slots(sched::pool_kind::act, p) * stash_bytes(p, t_bytes, s_bytes);
    return b;
  }
};

}  // namespace strata::lower
