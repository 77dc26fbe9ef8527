#pragma once
// Pass 3, shapes: the model's per-sample input, every layer's input and output shape,
// and the model rules — shapes chain, one loss and last, residuals paired within a part.
#include <array>

#include "strata/plan/passes/placement.hpp"

namespace strata::detail {

template <class S>
struct shapes_pass : S {
  using S::num_layers, S::descs, S::input_option, S::num_taskgraphs, S::taskgraphs, S::loss_from_option,
      S::structure_diag;

  static constexpr bool input_known = [] {
    if constexpr (input_option.rank > 0) {  // if constexpr: nvcc warns #128-D "loop is not reachable"
      return true;
    } else {
      for (int i = 0; i < num_layers; ++i) {
        const auto& d = descs[idx(i)];
        if (d.in_shape.rank > 0) return true;
        if (d.role != layer_role::elementwise && d.role != layer_role::reshape && d.role != layer_role::residual_begin &&
            d.role != layer_role::residual_end && d.role != layer_role::shortcut_end)
          return d.reads_ids;
      }
      return false;
    }
  }();

  // Per-sample input of the model: Input<...>, else the first shape-fixing layer's input.
  static constexpr shape_t input_shape = [] {
    if constexpr (input_option.rank > 0) {
      return input_option;
    } else {
      for (int i = 0; i < num_layers; ++i) {
        const auto& d = descs[idx(i)];
        if (d.in_shape.rank > 0) return d.in_shape;
        if (d.reads_ids) return shape_v<1>;
      }
      return shape_v<1>;
    }
  }();

  // ---- what a data loader needs ------------------------------------------------------------
  // Each sample is input_elems values (input_shape, row-major; token ids when the first
  // layer reads ids, as an Embedding does).
  static constexpr long long input_elems = input_shape.numel();
  static constexpr bool reads_token_ids = num_layers > 0 && descs[0].reads_ids;
  // the vocabulary (token ids lie in [0, vocabulary)): the rows of the id-reading layer's
  // first parameter, its table; 0 when the model reads no ids
  static constexpr long long vocabulary = reads_token_ids ? descs[0].params[0].shape.dim[0] : 0;
  // Elements of every logical parameter tensor (the model's size, before any split); a tied
  // parameter (a TiedHead's table) is another layer's, counted there.
  static constexpr long long model_parameters = [] {
    long long n = 0;
    for (const layer_desc& d : descs)
      for (int k = 0; k < d.num_params; ++k)
        if (k != d.tie.param) n += d.params[idx(k)].shape.numel();
    return n;
  }();

  // The pipeline part of every layer.
  static constexpr auto layer_part = [] {
    std::array<int, idx(num_layers) + 1> a{};
    for (int t = 0; t < num_taskgraphs; ++t) {
      const auto& tg = taskgraphs[idx(t)];
      for (int i = tg.first_layer; i < tg.first_layer + tg.num_layers && i < num_layers; ++i) a[idx(i)] = tg.part;
    }
    return a;
  }();
  // Every layer's input and output shape, per sample.
  static constexpr auto shapes = [] {
    std::array<std::array<shape_t, 2>, idx(num_layers)> s{};
    std::array<shape_t, idx(num_layers) + 1> skip{};  // open residuals' inputs, innermost last
    int depth = 0;
    shape_t cur = input_shape;
    for (int i = 0; i < num_layers; ++i) {
      const layer_role r = descs[idx(i)].role;
      s[idx(i)][0] = cur;
      if (r == layer_role::residual_begin) skip[idx(depth++)] = cur;
      if (r == layer_role::residual_end && depth > 0) --depth;
      // a shortcut's end hands on the residual's input
      cur = r == layer_role::shortcut_end && depth > 0 ? skip[idx(depth - 1)] : descs[idx(i)].out_shape(cur);
      s[idx(i)][1] = cur;
    }
    return s;
  }();

  static constexpr diagnosis model_diag = [] {
    if (!input_known) return diagnosis{rule_id::input_shape};
    // in layer order, so that a broken residual is reported at the residual, before the
    // layer after it receives the wrong shape: the branch returns the input's shape, within
    // one pipeline part
    std::array<int, idx(num_layers) + 1> open{}, begin{};  // the skip's layer, and the residual's begin
    int depth = 0;
    for (int i = 0; i < num_layers; ++i) {
      const auto& d = descs[idx(i)];
      const shape_t in = shapes[idx(i)][0];
      if (d.in_shape.rank > 0 && in.last() != d.in_shape.last())
        return diagnosis{rule_id::shapes_chain, i, in.last(), d.in_shape.last()};
      if (diagnosis own = d.input_problem(in); !own.ok()) {
        own.a = i;
        return own;
      }
      // layers that fix more than the feature axis (attention's sequence) check every axis,
      // once the input has as many
      if (d.in_shape.rank > 1 && in.rank < d.in_shape.rank)
        return diagnosis{rule_id::input_rank, i, in.rank, d.in_shape.rank};
      if (d.in_shape.rank > 1)
        for (int a = 0; a + 1 < d.in_shape.rank; ++a) {
          const int want = d.in_shape.dim[idx(a)];
          const int got = in.dim[idx(in.rank - d.in_shape.rank + a)];
          if (got != want) return diagnosis{rule_id::input_axis, i, got, want};
        }
      const layer_role r = d.role;
      if (r == layer_role::residual_begin) begin[idx(depth)] = i, open[idx(depth++)] = i;
      if (r == layer_role::shortcut_end) {  // from here on the skip is the shortcut's output
        // one shortcut per residual, inside it
        if (depth == 0 || open[idx(depth - 1)] != begin[idx(depth - 1)]) return diagnosis{rule_id::residual_pairs, i, 0};
        if (layer_part[idx(begin[idx(depth - 1)])] != layer_part[idx(i)])
          return diagnosis{rule_id::residual_part, begin[idx(depth - 1)], layer_part[idx(begin[idx(depth - 1)])],
                           layer_part[idx(i)]};
        open[idx(depth - 1)] = i;
      }
      if (r != layer_role::residual_end) continue;
      if (depth == 0) return diagnosis{rule_id::residual_pairs, i, 0};
      const int b = open[idx(--depth)], first = begin[idx(depth)];
      const long long got = shapes[idx(i)][0].numel(), want = shapes[idx(b)][0].numel();
      if (shapes[idx(i)][0] != shapes[idx(b)][0]) return diagnosis{rule_id::residual_shape, i, got, want};
      const int pb = layer_part[idx(first)], pe = layer_part[idx(i)];
      if (pb != pe) return diagnosis{rule_id::residual_part, first, pb, pe};
    }
    if (depth > 0) return diagnosis{rule_id::residual_pairs, open[idx(depth - 1)], 1};
    int losses = 0;
    for (int i = 0; i < num_layers - (loss_from_option ? 1 : 0); ++i)
      if (descs[idx(i)].role == layer_role::loss) ++losses;
    if (loss_from_option && losses > 0) return diagnosis{rule_id::loss_once, losses, 1};
    for (int i = 0; i < num_layers; ++i)
      if (descs[idx(i)].role == layer_role::loss && i != num_layers - 1)
        return diagnosis{rule_id::loss_last, i, num_layers};
    if (num_layers == 0 || descs[idx(num_layers - 1)].role != layer_role::loss) return diagnosis{rule_id::needs_loss};
    return diagnosis{};
  }();
  // The guard is part of the template argument: `ok || sizeof(raised<...>)` would still instantiate it.
  static_assert(sizeof(raised<structure_diag.ok() ? model_diag.id : rule_id::ok, model_diag.a, model_diag.b,
                              model_diag.c, model_diag.d>) != 0);
};

}  // namespace strata::detail
