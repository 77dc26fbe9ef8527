#pragma once
// Pass 4, sharding: each layer's layouts, local shapes and collectives on its TaskGraph
// (plan/sharding.hpp), the sharding rules, the activation-recomputation regions
// (plan/recompute.hpp), and the facts derived from them.
#include <array>

#include "strata/plan/passes/shapes.hpp"
#include "strata/plan/recompute.hpp"
#include "strata/plan/sharding.hpp"

namespace strata::detail {

template <class S>
struct shard_pass : S {
  using S::num_layers, S::num_taskgraphs, S::taskgraphs, S::descs, S::shapes, S::structure_diag, S::model_diag,
      S::mode, S::tensor_depth, S::micro_batch, S::sequence_parallel, S::recompute, S::mesh, S::chunks, S::context_exchange;
  using typename S::items;

  static constexpr auto sharded = [] {
    std::array<layer_plan, idx(num_layers)> lp{};
    for (int t = 0; t < num_taskgraphs; ++t) {
      const auto& tg = taskgraphs[idx(t)];
      for (int i = tg.first_layer; i < tg.first_layer + tg.num_layers && i < num_layers; ++i) {
        lp[idx(i)].taskgraph = t;
        lp[idx(i)].part = tg.part;
      }
    }
    for (int i = 0; i < num_layers; ++i) {
      lp[idx(i)].desc = descs[idx(i)];
      lp[idx(i)].in = shapes[idx(i)][0];
      lp[idx(i)].out = shapes[idx(i)][1];
    }
    // A model that breaks a structural or shape rule is reported by that rule alone.
    if (!structure_diag.ok() || !model_diag.ok()) {
      shard_result<idx(num_layers), idx(num_taskgraphs)> r{};
      r.layers = lp;
      return r;
    }
    return plan_shardings(lp, taskgraphs, shard_inputs{mode, tensor_depth, micro_batch, sequence_parallel, context_exchange});
  }();

  // SequenceParallel acts where a row-wise layer of a Split<N> TaskGraph takes a partial sum
  // as a row split; a plan in which no layer does would run exactly as without it.
  static constexpr diagnosis sequence_parallel_diag = [] {
    if (!sequence_parallel || mode != tensor_mode::d1) return diagnosis{};
    int first_split = -1;
    for (int i = 0; i < num_layers; ++i) {
      const taskgraph_desc& tg = taskgraphs[idx(sharded.layers[idx(i)].taskgraph)];
      if (tg.kind != strategy_kind::split || tg.devices < 2) continue;
      if (first_split < 0) first_split = i;
      if (sharded.layers[idx(i)].in_layout == sbp::split_batch) return diagnosis{};
    }
    return diagnosis{rule_id::sequence_parallel, first_split};
  }();
  // ---- a tied parameter (layers/layer.hpp's tied_param) ---------------------------------------
  // The user's parameter and its owner: the one other layer of the owner's role whose
  // parameter has the same shape, cut alike on every device (rules [tied-owner],
  // [tied-once], [tied-shards]).
  struct tie_result {
    tie_info tie{};
    diagnosis diag{};
  };
  static constexpr tie_result tie_found = [] {
    tie_result r{};
    const auto& L = sharded.layers;
    for (int i = 0; i < num_layers; ++i) {
      const tied_param tp = L[idx(i)].desc.tie;
      if (tp.param < 0 || tp.param >= L[idx(i)].desc.num_params) continue;
      if (r.tie.user >= 0) {
        r.diag = first_of(r.diag, diagnosis{rule_id::tied_once, i, r.tie.user});
        continue;
      }
      r.tie.user = i;
      r.tie.user_param = tp.param;
      int matches = 0;
      for (int o = 0; o < num_layers; ++o) {
        const layer_desc& od = L[idx(o)].desc;
        if (o == i || od.role != tp.owner || tp.owner_param >= od.num_params) continue;
        if (!(od.params[idx(tp.owner_param)].shape == L[idx(i)].desc.params[idx(tp.param)].shape)) continue;
        ++matches;
        r.tie.owner = o;
        r.tie.owner_param = tp.owner_param;
      }
      if (matches != 1) {
        r.diag = first_of(r.diag, diagnosis{rule_id::tied_owner, i, matches});
        r.tie = {};
        continue;
      }
      const int o = r.tie.owner;
      bool alike = L[idx(o)].local_params[idx(r.tie.owner_param)] == L[idx(i)].local_params[idx(tp.param)];
      for (int d = 0; d < S::part_devices; ++d)
        alike = alike && detail::param_block(L[idx(o)], r.tie.owner_param, mode, mesh.features, d) ==
                             detail::param_block(L[idx(i)], tp.param, mode, mesh.features, d);
      if (!alike) r.diag = first_of(r.diag, diagnosis{rule_id::tied_shards, i, o});
    }
    return r;
  }();
  static constexpr tie_info tie = tie_found.diag.ok() ? tie_found.tie : tie_info{};

  // The first sharding rule a layer or the pass found broken, raised once the structure
  // and shapes are known to hold.
  static constexpr diagnosis shard_diag = first_of(first_of(sharded.violation, sequence_parallel_diag), tie_found.diag);
  static_assert(sizeof(raised<structure_diag.ok() && model_diag.ok() ? shard_diag.id : rule_id::ok, shard_diag.a,
                              shard_diag.b, shard_diag.c, shard_diag.d>) != 0);

  static constexpr std::array<layer_plan, idx(num_layers)> layer_plans = sharded.layers;

  // ---- activation recomputation (plan/recompute.hpp) -----------------------------------------
  static constexpr auto recompute_plan =
      plan_recompute(layer_plans, recompute, items_info<items>::user_marks, items_info<items>::block_marks);
  // The region each layer is recomputed in (−1: its activations are kept), and their number.
  static constexpr auto recompute_region = recompute_plan.region;
  static constexpr int recompute_regions = recompute_plan.regions;

  // ---- the loss's labels -------------------------------------------------------------------
  // labels_per_sample labels per sample, each in [0, classes).
  static constexpr long long labels_per_sample = [] {
    if constexpr (num_layers == 0) return 0LL;
    else {
      const shape_t in = layer_plans[idx(num_layers - 1)].in;
      return in.last() > 0 ? in.rows() : 0LL;
    }
  }();
  static constexpr long long classes = [] {
    if constexpr (num_layers == 0) return 0LL;
    else return static_cast<long long>(layer_plans[idx(num_layers - 1)].in.last());
  }();

  // ---- blocks a device holds -------------------------------------------------------------------
  // The block of parameter k of layer `layer` that device `index` of its part holds
  // (exec::logical_index's numbering), and the first device of the part that holds the same
  // block: the one that writes it where one copy is wanted (checkpoints, gathers).
  static constexpr int param_block(int layer, int k, int index) {
    return detail::param_block(layer_plans[idx(layer)], k, mode, mesh.features, S::layout_index(index));
  }
  static constexpr int param_holder(int layer, int k, int index) {
    for (int d = 0; d < index; ++d)
      if (param_block(layer, k, d) == param_block(layer, k, index)) return d;
    return index;
  }
  // The block of layer `layer`'s input activation that device `index` holds (S(0,-1)).
  static constexpr act_block input_block(int layer, int index) {
    return block_of(mode, mesh.features, index, layer_plans[idx(layer)].turned);
  }
  // Parameter elements this device holds for pipeline part `part`, and for all parts of `stage`.
  static constexpr long long part_param_elems(int part) {
    long long n = 0;
    for (const auto& lp : layer_plans)
      if (lp.part == part) n += lp.local_param_elems;
    return n;
  }
  static constexpr long long stage_param_elems(int stage) {
    long long n = 0;
    for (int c = 0; c < chunks; ++c) n += part_param_elems(S::part_of(stage, c));
    return n;
  }
};

}  // namespace strata::detail
