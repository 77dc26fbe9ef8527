#pragma once
// Lowering, first half: every layer call described (local dimensions, memory, the
// device-independent flags and each device's origin), then every pipeline part laid out —
// its buffers in the static buffer plan and its step lists: loading the input, layout
// conversions (with the collective the sharding pass derived), copies, the loss's
// preparation and the layer calls, forward and backward (recomputed regions run their
// forward again at the start of their backward).
#include <array>
#include <cstddef>

#include "strata/plan/lower/tables.hpp"

namespace strata::lower::detail {

// The rows of a per-sample shape in a micro-batch of mb samples (every axis but the last).
constexpr long long batch_rows(long long mb, const shape_t& s) { return mb * s.rows(); }

// A device's rows and columns of a micro-batch's tensor of per-sample shape s in layout l.
// Context<N> cuts every sample's positions: the rows of a [Seq, ...] tensor, and the single
// row of a [Seq] tensor of token ids by its columns (so any micro-batch divides).
// Context<N, Split<T>>: every layout (cut over the T devices of a context group) holds the
// group's 1/N of the rows.
template <class P>
constexpr bool cuts_columns(const shape_t& s, sbp l) {
  return P::context > 1 && (l == sbp::split_batch || P::context_rows > 1) && s.rows() == 1;
}
template <class P>
constexpr long long local_rows(const shape_t& s, sbp l) {
  return cuts_columns<P>(s, l)
             ? P::micro_batch
             : layout_rows(batch_rows(P::micro_batch, s), l, P::layout_devices, P::mesh) / P::context_rows;
}
template <class P>
constexpr long long local_cols(const shape_t& s, sbp l) {
  return cuts_columns<P>(s, l) ? s.last() / P::context : layout_cols(s.last(), l, P::layout_devices, P::mesh);
}

// Work offsets are codes until the stage's sizes are known: values are [ping 0 | ping 1 |
// staging | scratch | recompute | skip slots | gathered], stats [scratch | recompute], ids
// [recompute]; a recompute buffer at offset o within its section is coded recompute_code − o,
// skip slot k skip_code − k.
inline constexpr long long ping0 = -1, ping1 = -2, staging_code = -3, scratch_code = -4, gathered_code = -5,
                           skip_code = -6;
// (a slot per nesting depth: no model nests 2^20 residuals deep)
inline constexpr long long max_skip_slots = 1 << 20, recompute_code = skip_code - max_skip_slots;
constexpr long long fix(const buf& b, const work_layout& w) {
  const long long code = b.off;
  if (code <= skip_code && code > recompute_code)
    return 2 * w.ping + w.staging + w.scratch_values + w.recompute_values + (skip_code - code) * w.skip_slot;
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
    case gathered_code:
      return 2 * w.ping + w.staging + w.scratch_values + w.recompute_values + w.skip_slot * w.skip_slots;
  }
  return code;  // stats scratch: 0
}

// Local dimensions, memory and flags of every layer call, and each device's origin.
template <class P, class Tables>
constexpr void describe_calls(Tables& t) {
  const auto& lp = P::layer_plans;
  for (int i = 0; i < P::num_layers; ++i) {
    const layer_plan& L = lp[idx(i)];
    layer_call& c = t.calls[idx(i)];
    const bool loss = L.desc.role == layer_role::loss;
    c.dims.rows = local_rows<P>(L.in, L.in_layout);
    c.dims.in_cols = local_cols<P>(L.in, L.in_layout);
    c.dims.out_rows = loss ? 0 : local_rows<P>(L.out, L.out_layout);
    c.dims.out_cols = loss ? 0 : local_cols<P>(L.out, L.out_layout);
    c.dims.in = L.in;
    c.dims.out = L.out;
    c.dims.n = P::layout_devices;
    c.dims.sig = L.sig;
    c.dims.q = L.in_layout == sbp::block ? P::mesh.features : 0;
    c.dims.context = L.context;
    c.dims.exchange = L.exchange;
    const int segments = context_segments(L.context, L.exchange);
    // SequenceParallel under Context<N, Split<T>>: each device holds a share of one piece
    const bool cuts_pieces = P::context_rows > 1 && L.in_layout == sbp::split_batch;
    c.dims.pieces = cuts_pieces ? 1 : segments;
    c.sample_rows = (cuts_columns<P>(L.in, L.in_layout) ? L.in.last() : L.in.rows()) / L.context / segments *
                    c.dims.pieces;
    c.needs = L.desc.memory(c.dims);
    // (the lowering keeps the gathered input where the layer is recomputed: a region keeps
    // only its input)
    c.regather = P::sequence_parallel && P::context == 1 && c.needs.keep_input && !c.needs.view &&
                 L.arrives == sbp::split_batch && strata::detail::convert(L.arrives, L.in_layout) == collective::all_gather;
    c.arrived_elems = c.regather ? local_rows<P>(L.in, L.arrives) * local_cols<P>(L.in, L.arrives) : 0;
    c.num_params = L.desc.num_params;
    c.taskgraph = L.taskgraph;
    c.reads_ids = i == 0 && L.desc.reads_ids;
    c.loss = loss;
    c.aux_loss = L.desc.aux_loss_stats > 0;
    c.own = P::layout_axis;
    for (int k = L.num_conversion_comms; k < L.num_comms && c.num_groups < 3; ++k)
      c.groups[idx(c.num_groups++)] = L.comms[idx(k)].group;
    // (tables without origins — the search's probes, which read only each call's dimensions
    // and needs — stop here)
    if constexpr (requires { t.origins; })
      for (int d = 0; d < P::part_devices; ++d) {
        call_origin& o = t.origins[idx(i)][idx(d)];
        const int ld = P::layout_index(d), cd = P::context_index(d);
        const strata::detail::act_block b = P::input_block(i, ld);
        const long long rows = c.dims.rows, cols = c.dims.in_cols;
        o.index = ld;
        o.context_index = cd;
        if (L.in_layout == sbp::split_batch) o.row0 = ld * rows;
        if (L.in_layout == sbp::split_feature) o.col0 = ld * cols;
        if (L.in_layout == sbp::block) o.row0 = b.row * rows, o.col0 = b.feature * cols;
        o.batch_first = L.in_layout == sbp::split_batch ? ld * rows * cols : 0;
        // Context<N, Split<T>>: the context group's rows of the micro-batch (arranged chunk-major)
        const long long group_rows = cuts_pieces ? rows * P::layout_devices : rows;
        o.row0 += P::context_block(d) * group_rows;
        o.batch_first += P::context_block(d) * group_rows * cols;
        o.sample_row0 = L.context > 1 ? 0 : o.row0;
        const long long piece = c.sample_rows / c.dims.pieces;  // context index k: pieces k and 2N − 1 − k of 2N
        o.pos0 = L.context > 1 ? context_piece_pos0(L.context, cd, 0, piece) : 0;
        o.pos1 = c.dims.pieces > 1 ? context_piece_pos0(L.context, cd, 1, piece) : 0;
        if (cuts_pieces) {  // the group's rows [piece][sample][len] cut T ways: T/segments devices per piece
          const int per_piece = P::layout_devices / segments;
          o.pos0 = context_piece_pos0(L.context, cd, ld / per_piece, piece);
          o.sample_row0 = (ld % per_piece) * rows;
        }
        // one device books rows that several devices of the part hold (S(0,-1): the one with
        // the first feature block)
        o.counts = L.in_layout == sbp::split_batch || (L.in_layout == sbp::block ? b.feature == 0 : ld == 0);
      }
  }
}

// One part's buffers and its forward and backward step lists (buckets come later).
template <class P, class Tables>
constexpr void lay_out_part(Tables& t, int p, const std::array<bool, static_cast<std::size_t>(P::num_layers)>& need_dx) {
  const auto& lp = P::layer_plans;
  const int n = P::layout_devices;
  part_plan& pp = t.parts[idx(p)];
  work_layout& w = t.work[idx(pp.stage)];
  auto rows_of = [&](const shape_t& s, sbp l) { return local_rows<P>(s, l); };
  auto cols_of = [&](const shape_t& s, sbp l) { return local_cols<P>(s, l); };
  long long act_v = 0, act_s = 0, act_i = 0;
  auto act_buf = [&](kind k, long long e) {
    long long& o = k == kind::values ? act_v : k == kind::stats ? act_s : act_i;
    const buf b{pool::act, k, p, o, e};
    o += e;
    return b;
  };
  // Work buffers: two used in turn (a transient never shares one with the other operand
  // of its call), the conversion staging, the scratch. Offsets are codes until the
  // stage's sizes are known (fix).
  auto ping = [&](int which, long long e) {
    w.ping = max2(w.ping, e);
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
    c.rows = batch_rows(P::micro_batch, s) / P::context_rows;
    c.group = P::layout_axis;
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
      w.staging = max2(w.staging, e);
      c.staging = buf{pool::work, kind::values, -1, staging_code, e};
    }
    return t.num_convs++;
  };
  auto push = [&](act k, int index) { t.steps[idx(t.num_steps++)] = step{k, index}; };
  // the input of part q as it arrives (its act slot's first buffer)
  auto entry_of = [&](int q) {
    const layer_plan& E = lp[idx(t.parts[idx(q)].first)];
    return buf{pool::act, kind::values, q, 0, rows_of(E.in, E.arrives) * cols_of(E.in, E.arrives)};
  };
  auto copy_step = [&](const buf& src, const buf& dst, long long e) {
    t.copies[idx(t.num_copies)] = copy_op{src, dst, e, pp.stage};
    push(act::copy, t.num_copies++);
  };
  auto converts = [&](int i) { return lp[idx(i)].arrives != lp[idx(i)].in_layout; };
  auto in_place = [&](sbp from, sbp to) { return strata::detail::convert(from, to) == collective::all_reduce; };
  const bool has_next = p + 1 < P::num_parts, has_prev = p > 0;
  const bool next_here = has_next && P::stage_of_part(p + 1) == pp.stage;
  const bool prev_here = has_prev && P::stage_of_part(p - 1) == pp.stage;
  // A view aliases its input, except at the part's edges, where its output (or input
  // gradient) is a message: then it copies.
  auto aliases = [&](int i, const layer_call& c) { return c.needs.view && !(i == pp.last && has_next); };
  // A layer's forward: a view copies (or, aliased, runs nothing); a loss prepares first.
  auto forward_step = [&](act k, int i) {
    const layer_call& c = t.calls[idx(i)];
    if (c.needs.view) {
      if (c.y != c.x) copy_step(c.x, c.y, c.dims.rows * c.dims.in_cols);
      return;
    }
    if (c.loss) push(act::prepare_loss, i);
    push(k, i);
  };

  // Recomputed regions (P::recompute_region): a region's input is kept in the act slot;
  // everything its layers write in forward goes to the stage's recompute buffers (rc),
  // written again when the backward recomputes the region.
  auto region = [&](int i) { return i < pp.first || i > pp.last ? -1 : P::recompute_region[idx(i)]; };
  auto region_first = [&](int i) { return region(i) >= 0 && region(i - 1) != region(i); };
  auto region_last = [&](int i) { return region(i) >= 0 && region(i + 1) != region(i); };
  long long rc_v = 0, rc_s = 0, rc_i = 0;
  auto rc = [&](kind k, long long e) {
    long long& o = k == kind::values ? rc_v : k == kind::stats ? rc_s : rc_i;
    long long& top = k == kind::values ? w.recompute_values : k == kind::stats ? w.recompute_stats : w.recompute_ids;
    const buf b{pool::work, k, -1, recompute_code - o, e};
    o += e;
    top = max2(top, o);
    return b;
  };
  // where layer i keeps something for its backward
  auto keep = [&](int i, kind k, long long e) { return region(i) >= 0 ? rc(k, e) : act_buf(k, e); };
  std::array<int, idx(P::num_layers)> fconv{};  // each layer's forward conversion, for the recompute
  // A layer that keeps its row split and gathers it again (layer_call::regather) outside a
  // recomputed region: its input is gathered into the stage's gathered buffer, forward and
  // backward, from the row split it arrived as (gather_src), which is kept.
  auto regathers = [&](int i) {
    return i >= pp.first && i <= pp.last && regathers_at(t.calls.data(), P::recompute_region.data(), i);
  };
  auto gathered = [&](long long e) {
    w.gathered = max2(w.gathered, e);
    return buf{pool::work, kind::values, -1, gathered_code, e};
  };
  std::array<buf, idx(P::num_layers)> gather_src{};

  // Which layer inputs must survive until backward: kept inputs (but a row split gathered
  // again: its arriving split instead), the input of a view whose output (the same buffer)
  // is kept, and a recomputed region's input.
  std::array<bool, idx(P::num_layers)> persist{};
  for (int i = pp.last; i >= pp.first; --i) {
    const layer_call& c = t.calls[idx(i)];
    persist[idx(i)] = (c.needs.keep_input && !regathers(i)) || region_first(i) ||
                      (aliases(i, c) && i < pp.last && ((!converts(i + 1) && persist[idx(i + 1)]) || regathers(i + 1)));
  }

  // ---- forward ---------------------------------------------------------------------
  std::array<int, idx(P::num_layers) + 1> open{};  // residuals begun and not yet ended
  int depth = 0;
  // A skip's gradient lives while this micro-batch's backward runs: a work slot per nesting
  // depth (one backward runs at a time on a device), not the in-flight stash. A ShortcutEnd
  // hands the ResidualEnd's on and leaves its own in the same slot.
  auto skip_slot = [&](int slot, long long e) {
    w.skip_slot = max2(w.skip_slot, e);
    w.skip_slots = max2(w.skip_slots, static_cast<long long>(slot) + 1);
    return buf{pool::work, kind::values, -1, skip_code - slot, e};
  };
  // statistics its layers keep across steps: the stage's state, one block per layer
  for (int i = pp.first; i <= pp.last; ++i) {
    layer_call& c = t.calls[idx(i)];
    if (c.needs.state_stats + c.needs.state_sums == 0) continue;
    c.state_off = w.state;
    w.state += c.needs.state_stats + c.needs.state_sums;
  }
  pp.fwd_begin = t.num_steps;
  const layer_plan& F = lp[idx(pp.first)];
  const long long entry_elems = rows_of(F.in, F.arrives) * cols_of(F.in, F.arrives);
  if (!t.calls[idx(pp.first)].reads_ids) pp.entry = act_buf(kind::values, entry_elems);  // == entry_of(p)
  if (p == 0 && !pp.entry.empty()) push(act::load, p);
  buf src = pp.entry;  // what arrives at layer i
  for (int i = pp.first; i <= pp.last; ++i) {
    const layer_plan& L = lp[idx(i)];
    layer_call& c = t.calls[idx(i)];
    const long long x_elems = c.dims.rows * c.dims.in_cols;
    if (region_first(i)) rc_v = rc_s = rc_i = 0;  // regions reuse the recompute buffers
    const bool inside = region(i) >= 0 && !region_first(i);
    fconv[idx(i)] = -1;
    if (converts(i) && !in_place(L.arrives, L.in_layout)) {
      if (regathers(i)) gather_src[idx(i)] = src;
      const buf dst = regathers(i) ? gathered(x_elems)
                      : inside     ? rc(kind::values, x_elems)
                      : persist[idx(i)] ? act_buf(kind::values, x_elems) : ping(other(src), x_elems);
      fconv[idx(i)] = conv_of(i, pass::forward, L.arrives, L.in_layout, L.in, src, dst);
      push(act::convert, fconv[idx(i)]);
      c.x = dst;
    } else {
      if (converts(i)) {
        fconv[idx(i)] = conv_of(i, pass::forward, L.arrives, L.in_layout, L.in, src, src);
        push(act::convert, fconv[idx(i)]);
      }
      c.x = src;
    }
    if (c.needs.stash_values) c.stash_values = keep(i, kind::values, c.needs.stash_values);
    if (L.desc.role == layer_role::residual_begin) open[idx(depth++)] = i;
    if (L.desc.role == layer_role::shortcut_end && depth > 0) {
      // it hands on the residual's input, and its own (kept) input is the skip from here on
      const int b = open[idx(depth - 1)];
      c.skip = t.calls[idx(b)].x;
      if (c.needs.backward_values) c.backward_values = skip_slot(depth - 1, c.needs.backward_values);
      t.calls[idx(b)].skip_grad = c.backward_values;
      open[idx(depth - 1)] = i;
    }
    if (L.desc.role == layer_role::residual_end && depth > 0) {
      const int b = open[idx(--depth)];
      c.skip = t.calls[idx(b)].x;  // kept: ResidualBegin keeps its input
      if (c.needs.backward_values) c.backward_values = skip_slot(depth, c.needs.backward_values);
      t.calls[idx(b)].skip_grad = c.backward_values;
    }
    if (c.needs.stash_stats) c.stash_stats = keep(i, kind::stats, c.needs.stash_stats);
    if (c.needs.stash_ids) c.stash_ids = keep(i, kind::ids, c.needs.stash_ids);
    if (c.needs.scratch_values) {
      w.scratch_values = max2(w.scratch_values, c.needs.scratch_values);
      c.scratch_values = buf{pool::work, kind::values, -1, scratch_code, c.needs.scratch_values};
    }
    if (c.needs.scratch_stats) {
      w.scratch_stats = max2(w.scratch_stats, c.needs.scratch_stats);
      c.scratch_stats = buf{pool::work, kind::stats, -1, 0, c.needs.scratch_stats};
    }
    const long long y_elems = c.dims.out_rows * c.dims.out_cols;
    if (aliases(i, c)) {
      c.y = c.x;
    } else if (c.loss) {
      c.y = buf{};
    } else if (i == pp.last) {
      // the output is a message: the exit pool, or (one stage) the next part's entry —
      // the first buffer of its act slot
      pp.exit = next_here ? entry_of(p + 1) : buf{pool::exit, kind::values, p, 0, y_elems};
      c.y = pp.exit;
    } else {
      const bool direct = !converts(i + 1) || in_place(lp[idx(i + 1)].arrives, lp[idx(i + 1)].in_layout);
      // kept: the next layer's input as it is, or the row split it gathers again
      const bool kept = (direct && persist[idx(i + 1)]) || regathers(i + 1);
      // inside a region nothing goes to the ping buffers: the recompute must not
      // overwrite the gradient that its backward is about to read
      if (region(i) >= 0 && (region(i + 1) == region(i) || !kept)) c.y = rc(kind::values, y_elems);
      else c.y = kept ? act_buf(kind::values, y_elems) : ping(other(c.x), y_elems);
    }
    forward_step(act::forward, i);
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
    pp.gin = prev_here ? buf{pool::gout, kind::values, p - 1, 0, entry_elems} : buf{pool::gin, kind::values, p, 0, entry_elems};
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
        if (j != f && fconv[idx(j)] >= 0) push(act::convert, fconv[idx(j)]);
        forward_step(act::recompute, j);
      }
    }
    c.dy = dy;
    if (P::split_backward && c.needs.weight_pass && L.desc.num_params > 0) {
      // W runs after later work has reused the ping buffers: keep dy in the slot
      const bool per_slot = dy.where == pool::gout && dy.part == p;
      c.dy_keep = per_slot ? dy : act_buf(kind::values, c.dims.out_rows * c.dims.out_cols);
      if (c.needs.weight_keep > 0) c.keep = act_buf(kind::values, c.needs.weight_keep);
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
    if (regathers(i)) {  // its input gathered again from the kept row split
      const int k = conv_of(i, pass::backward, L.arrives, L.in_layout, L.in, gather_src[idx(i)], c.x);
      t.convs[idx(k)].regather = true;
      push(act::convert, k);
    }
    if (c.needs.view && !c.needs.backward_kernel) {
      // a view's input gradient at the part's edge is a message: copied
      if (!alias && !c.dx.empty() && c.dx != c.dy) copy_step(c.dy, c.dx, c.dims.rows * c.dims.in_cols);
    } else if (c.loss) {
      push(act::prepare_loss, i);
      push(act::backward, i);
    } else if (!c.dy_keep.empty()) {
      if (c.dy_keep != c.dy) copy_step(c.dy, c.dy_keep, c.dims.out_rows * c.dims.out_cols);  // the ping buffer is reused before W
      push(act::backward_data, i);
    } else {
      push(act::backward, i);
    }
    if (conv) {
      const buf dst = conv_in_place ? c.dx
                      : i == pp.first ? pp.gin
                                      : ping(other(c.dx), rows_of(L.in, L.arrives) * cols_of(L.in, L.arrives));
      push(act::convert, conv_of(i, pass::backward, g_in, g_out, L.in, c.dx, dst));
      dy = dst;
    } else {
      dy = c.dx;
    }
    if (!want_dx) break;
  }
  pp.bwd_end = t.num_steps;
  pp.act_values = act_v;  // with what the backward keeps for W
}

// Every part of the plan; then the work offsets, fixed once every stage's sizes are known.
template <class P, class Tables>
constexpr void lay_out_parts(Tables& t) {
  const auto& lp = P::layer_plans;
  const auto need_dx = strata::detail::input_grads_needed(lp);
  for (int p = 0; p < P::num_parts; ++p) {
    part_plan& pp = t.parts[idx(p)];
    pp.stage = P::stage_of_part(p);
    for (int i = 0; i < P::num_layers; ++i)
      if (lp[idx(i)].part == p) {
        if (pp.first < 0) pp.first = i;
        pp.last = i;
      }
  }
  for (int p = 0; p < P::num_parts; ++p)
    if (t.parts[idx(p)].first >= 0) lay_out_part<P>(t, p, need_dx);

  // Work offsets: [ping 0 | ping 1 | staging | scratch values], stats: [scratch].
  for (int i = 0; i < P::num_layers; ++i) {
    layer_call& c = t.calls[idx(i)];
    const work_layout& w = t.work[idx(t.parts[idx(lp[idx(i)].part)].stage)];
    for (buf* b : {&c.x, &c.y, &c.dy, &c.dx, &c.scratch_values, &c.scratch_stats, &c.backward_values, &c.skip,
                   &c.skip_grad, &c.stash_values, &c.stash_stats, &c.stash_ids, &c.dy_keep, &c.keep})
      if (b->where == pool::work) b->off = fix(*b, w);
  }
  for (int k = 0; k < t.num_convs; ++k) {
    conversion& c = t.convs[idx(k)];
    const work_layout& w = t.work[idx(t.parts[idx(lp[idx(c.layer)].part)].stage)];
    for (buf* b : {&c.src, &c.dst, &c.staging})
      if (b->where == pool::work) b->off = fix(*b, w);
  }
  for (int k = 0; k < t.num_copies; ++k) {
    copy_op& c = t.copies[idx(k)];
    for (buf* b : {&c.src, &c.dst})
      if (b->where == pool::work) b->off = fix(*b, t.work[idx(c.stage)]);
  }
}

}  // namespace strata::lower::detail
