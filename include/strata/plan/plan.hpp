#pragma once
// Plan<Net, Options...>: the whole parallel training plan, computed and checked at
// compile time — TaskGraphs, placement, shardings, collectives, schedule, proofs and
// budgets — and lowered (plan/lower.hpp) into the action lists and buffer plan an
// executor for any backend runs.
#include <array>
#include <string_view>
#include <type_traits>

#include "strata/core/diagnosis.hpp"
#include "strata/core/precision.hpp"
#include "strata/core/rules.hpp"
#include "strata/layers/layer.hpp"
#include "strata/plan/auto_stages.hpp"
#include "strata/plan/communication.hpp"
#include "strata/plan/lower.hpp"
#include "strata/plan/memory.hpp"
#include "strata/plan/model.hpp"
#include "strata/plan/options_parse.hpp"
#include "strata/plan/recompute.hpp"
#include "strata/plan/schedule.hpp"
#include "strata/plan/sharding.hpp"
#include "strata/strategy/options.hpp"
#include "strata/strategy/strategy.hpp"

namespace strata {

struct NoLoss {};

// Coordinates of a rank: which replica, which pipeline stage, which device of the stage.
struct rank_coord {
  int data = 0, stage = 0, index = 0;
  int row = 0, col = 0, depth = 0;  // position in a 2D/2.5D/3D tensor mesh
};

namespace detail {

template <class L>
constexpr bool layer_ok() {
  if constexpr (Layer<L> || is_annotation_v<L>) return true;  // annotations: the nesting rule speaks
  else return layer_requirements<L>::value;
}
template <class L>
constexpr layer_desc describe_any() {
  if constexpr (Layer<L>) return describe<L>();
  else return layer_desc{};
}

template <class List>
struct layer_checks;
template <class... L>
struct layer_checks<type_list<L...>> {
  // an array, not a fold: a fold over 257 layers exceeds clang's expression nesting limit
  static constexpr bool value = [] {
    constexpr std::array<bool, sizeof...(L) + 1> ok{layer_ok<L>()..., true};
    for (bool b : ok)
      if (!b) return false;
    return true;
  }();
  static constexpr std::array<layer_desc, sizeof...(L)> descs{describe_any<L>()...};
};

template <class S>
constexpr bool default_ok() {
  if constexpr (is_strategy_v<S>) {
    if constexpr (S::layers::size == 0) return true;
    else return rule::default_is_strategy<S>::value;
  } else {
    return rule::default_is_strategy<S>::value;
  }
}

template <class T>
constexpr bool element_ok() {
  if constexpr (is_precision_v<T>) return true;
  else return rule::element_type_supported<T>::value;
}

constexpr int max1(int x) { return x > 0 ? x : 1; }
constexpr std::size_t idx(int i) { return static_cast<std::size_t>(i); }

// TaskGraphs: one per strategy item, one per run of bare items in a part.
template <std::size_t NI>
constexpr int count_taskgraphs(const std::array<item_desc, NI>& items, const std::array<int, NI>& part,
                               bool explicit_parts) {
  int n = 0;
  for (std::size_t i = 0; i < NI; ++i) {
    const bool continues = items[i].bare && i > 0 && items[i - 1].bare && (!explicit_parts || part[i] == part[i - 1]);
    if (!continues) ++n;
  }
  return n;
}

template <std::size_t NT, std::size_t NI>
constexpr std::array<taskgraph_desc, NT> build_taskgraphs(const std::array<item_desc, NI>& items,
                                                          const std::array<int, NI>& part, bool explicit_parts,
                                                          strategy_kind default_kind, int default_devices,
                                                          bool extra_loss_layer) {
  std::array<taskgraph_desc, NT> tgs{};
  int t = -1, layer = 0;
  for (std::size_t i = 0; i < NI; ++i) {
    const bool continues = items[i].bare && i > 0 && items[i - 1].bare && (!explicit_parts || part[i] == part[i - 1]);
    if (!continues) {
      ++t;
      tgs[idx(t)].kind = items[i].bare ? default_kind : items[i].kind;
      tgs[idx(t)].devices = items[i].bare ? default_devices : items[i].devices;
      tgs[idx(t)].part = explicit_parts ? part[i] : t;
      tgs[idx(t)].first_layer = layer;
      tgs[idx(t)].is_default = items[i].bare;
    }
    tgs[idx(t)].num_layers += items[i].num_layers;
    layer += items[i].num_layers;
  }
  if (extra_loss_layer && NT > 0) tgs[NT - 1].num_layers += 1;
  return tgs;
}

}  // namespace detail

template <class Net, class... Options>
struct Plan {
  // ---- options -------------------------------------------------------------------------
  static_assert(detail::check_options<Options...>());
  using schedule_t = typename detail::pick_t<option_kind::schedule, Schedule<PreferBackward>, Options...>::type;
  using loss_option_t = typename detail::pick_t<option_kind::loss, Loss<NoLoss>, Options...>::type;
  using tensor_t = detail::pick_t<option_kind::tensor_mode, Tensor1D, Options...>;
  using default_strategy = typename detail::pick_t<option_kind::default_strategy, Default<Replicate<1>>, Options...>::type;
  using element_type = typename detail::pick_t<option_kind::element, Element<float>, Options...>::type;
  static_assert(detail::default_ok<default_strategy>());
  static_assert(detail::element_ok<element_type>());

  static constexpr int micro_batch = detail::pick_t<option_kind::micro_batch, MicroBatch<1>, Options...>::value;
  static constexpr int num_micro_batch = detail::pick_t<option_kind::num_micro_batch, NumMicroBatch<1>, Options...>::value;
  static_assert(rule::micro_batch_positive<micro_batch>::value);
  static_assert(rule::num_micro_batch_positive<num_micro_batch>::value);
  // The schedule's builder, name and traits, read the same way for every tag (plan/schedule_traits.hpp).
  using schedule_info = sched::schedule_traits<schedule_t>;
  static constexpr std::string_view schedule_name = schedule_info::name;
  static constexpr int chunks = schedule_info::chunks;
  static_assert(rule::interleave_chunks_positive<chunks>::value);
  static_assert(rule::buckets_positive<detail::pick_t<option_kind::buckets, Buckets<5>, Options...>::value>::value);
  static constexpr int fixed_world = detail::pick_t<option_kind::world, World<0>, Options...>::value;
  static constexpr tensor_mode mode = tensor_t::mode;
  static constexpr int tensor_depth = tensor_t::depth;
  static constexpr reduce_method gradient_reduce =
      detail::pick_t<option_kind::gradient_reduce, GradientReduce<ReduceMean>, Options...>::method;
  static constexpr int buckets = detail::pick_t<option_kind::buckets, Buckets<5>, Options...>::value;
  static constexpr int zero = detail::pick_t<option_kind::zero, Zero<0>, Options...>::value;
  static_assert(rule::zero_level_known<zero>::value);
  static constexpr int apply_groups = detail::pick_t<option_kind::apply_groups, ApplyGroups<1>, Options...>::value;
  static_assert(rule::apply_groups_positive<apply_groups>::value);
  static constexpr offload_level offload =
      detail::pick_t<option_kind::offload, Offload<offload_level::none>, Options...>::value;
  static constexpr bool cast_weights_per_use =
      detail::pick_t<option_kind::weight_copies, KeepWeightCopies, Options...>::value;
  // Layers read their TaskGraph's weights from a staging buffer (exec/store.hpp); under
  // Zero<3> it is filled by an all-gather of the TaskGraph's partitioned parameters.
  static constexpr bool staged_weights = offload != offload_level::none || cast_weights_per_use || zero >= 3;
  // HalfGradientReduce<S>: S, or 0 for reductions in master precision.
  static constexpr int half_reduce = detail::pick_t<option_kind::half_reduce, FullGradientReduce, Options...>::value;
  static_assert(rule::half_reduce_scale<half_reduce == 0 ? 1 : half_reduce>::value);
  // AMP O1: an Element<f16> plan scales its loss dynamically unless it says otherwise.
  using loss_scale = typename detail::pick_t<
      option_kind::loss_scale, LossScale<std::conditional_t<std::is_same_v<element_type, f16>, DynamicScale<>, NoScale>>,
      Options...>::type;
  static_assert(rule::loss_scale_valid<static_cast<int>(loss_scale::kind), loss_scale::log2_init,
                                       loss_scale::growth_interval, static_cast<long long>(loss_scale::initial)>::value);
  static constexpr bool sequence_parallel =
      detail::pick_t<option_kind::sequence_parallel, NoSequenceParallel, Options...>::value;
  static constexpr checkpoint_mode recompute =
      detail::pick_t<option_kind::gradient_checkpoint, GradientCheckpoint<checkpoint_mode::collection>, Options...>::value;
  // Element<T> is the training precision (make_trainer's default T): activations and the
  // weights layers read in T, master weights, gradients and optimizer state in master_t<T>
  // (float for bf16), so the analyses below count each in its own type.
  static constexpr long long element_bytes = static_cast<long long>(sizeof(element_type));
  static constexpr long long master_bytes = static_cast<long long>(sizeof(master_t<element_type>));
  static constexpr long long stat_bytes = static_cast<long long>(sizeof(stat_t<element_type>));
  static constexpr bool mixed_precision = is_mixed_v<element_type>;
  static constexpr bool loss_from_option = !std::is_same_v<loss_option_t, NoLoss>;
  static constexpr shape_t input_option =
      detail::pick_t<option_kind::input, Input<>, Options...>::shape;

  // ---- model: items, layers, TaskGraphs, parts --------------------------------------------
  // The network planned: Net as written, or with AutoStages<K> the Pipeline the planner
  // cut it into (plan/auto_stages.hpp).
  using net = detail::resolve_net_t<Net, Options...>;
  using traits = detail::net_traits<net>;
  using items = typename traits::items;
  using model_layers = typename detail::items_info<items>::layers;
  using layers = std::conditional_t<loss_from_option, detail::concat_t<model_layers, type_list<loss_option_t>>,
                                    model_layers>;
  static constexpr int num_items = items::size;
  static constexpr int num_layers = layers::size;
  static constexpr auto item_descs = detail::items_info<items>::value;

  static constexpr std::array<layer_desc, static_cast<std::size_t>(num_layers)> descs =
      detail::layer_checks<layers>::descs;

  static constexpr int default_devices = [] {
    if constexpr (is_strategy_v<default_strategy>) return default_strategy::devices;
    else return 1;
  }();
  static constexpr strategy_kind default_kind = [] {
    if constexpr (is_strategy_v<default_strategy>) return default_strategy::kind;
    else return strategy_kind::replicate;
  }();

  static constexpr auto item_part = [] {
    std::array<int, static_cast<std::size_t>(num_items)> a{};
    if constexpr (traits::explicit_parts)
      for (int i = 0; i < num_items; ++i) a[detail::idx(i)] = traits::item_part[detail::idx(i)];
    return a;
  }();
  static constexpr int num_taskgraphs = detail::count_taskgraphs(item_descs, item_part, traits::explicit_parts);
  static constexpr std::array<taskgraph_desc, static_cast<std::size_t>(num_taskgraphs)> taskgraphs =
      detail::build_taskgraphs<static_cast<std::size_t>(num_taskgraphs)>(
          item_descs, item_part, traits::explicit_parts, default_kind, default_devices, loss_from_option);
  static constexpr int num_parts = traits::explicit_parts ? traits::num_parts : num_taskgraphs;
  // Physical pipeline stages: with V chunks, part k runs on stage k mod stages as chunk k / stages;
  // a V placement (ZeroBubbleV) puts the second chunk in reverse: stage s runs parts s and 2·stages − 1 − s.
  static constexpr int stages = detail::max1(num_parts / detail::max1(chunks));
  static constexpr bool v_shape = schedule_info::v_shape;
  static constexpr int part_devices = num_taskgraphs > 0 ? detail::max1(taskgraphs[0].devices) : 1;
  static constexpr int devices_per_replica = stages * part_devices;
  static constexpr int stage_of_part(int part) { return sched::placed_stage(stages, v_shape, part); }
  static constexpr int chunk_of_part(int part) { return part / stages; }
  static constexpr int part_of(int stage, int chunk) { return sched::placed_part(stages, v_shape, stage, chunk); }

 private:
  // ---- structural rules ---------------------------------------------------------------------
  static constexpr detail::diagnosis structure_diag = [] {
    using enum detail::rule_id;
    for (int i = 0; i < num_items; ++i) {
      const auto& it = item_descs[detail::idx(i)];
      if (it.group) return detail::diagnosis{nested_group, i};
      if (!it.bare && it.devices < 1) return detail::diagnosis{device_count, it.devices};
      if (it.nested_at >= 0) return detail::diagnosis{nested, it.devices, it.nested_at};
    }
    if (default_devices < 1) return detail::diagnosis{device_count, default_devices};
    if (traits::empty_part >= 0) return detail::diagnosis{empty_stage, traits::empty_part};
    for (int t = 0; t < num_taskgraphs; ++t)
      if (taskgraphs[detail::idx(t)].num_layers == 0) return detail::diagnosis{empty_taskgraph, t};
    for (int t = 1; t < num_taskgraphs; ++t) {
      const auto& tg = taskgraphs[detail::idx(t)];
      int first = t;  // first TaskGraph of the same part
      while (first > 0 && taskgraphs[detail::idx(first - 1)].part == tg.part) --first;
      if (first != t && tg.devices != taskgraphs[detail::idx(first)].devices)
        return detail::diagnosis{colocate_devices, t, tg.devices, taskgraphs[detail::idx(first)].devices};
      if (first == t && tg.devices != taskgraphs[0].devices)
        return detail::diagnosis{stage_devices, tg.part, tg.devices, taskgraphs[0].devices};
    }
    for (int t = 0; t < num_taskgraphs; ++t) {
      const auto& tg = taskgraphs[detail::idx(t)];
      if (tg.kind == strategy_kind::replicate && tg.devices > 1 && micro_batch % tg.devices != 0)
        return detail::diagnosis{replicate_batch, micro_batch, tg.devices};
      if (tg.kind == strategy_kind::split && tg.devices > 1) {
        const int n = tg.devices;
        if (mode == tensor_mode::d2 && detail::isqrt(n) * detail::isqrt(n) != n) return detail::diagnosis{tensor_2d, n};
        if (mode == tensor_mode::d2p5) {
          const int d = tensor_depth;
          const int q = d > 0 && n % d == 0 ? detail::isqrt(n / d) : 0;
          if (d < 1 || q * q * d != n || q < 1) return detail::diagnosis{tensor_2p5d, n, d};
        }
        if (mode == tensor_mode::d3 && detail::icbrt(n) * detail::icbrt(n) * detail::icbrt(n) != n)
          return detail::diagnosis{tensor_3d, n};
        if (mode != tensor_mode::d1 && zero > 0) return detail::diagnosis{tensor_zero, static_cast<int>(mode), zero};
      }
    }
    if (const detail::diagnosis d = schedule_info::check(num_parts, stages, num_micro_batch); !d.ok()) return d;
    if (fixed_world != 0 && (fixed_world < devices_per_replica || fixed_world % devices_per_replica != 0))
      return detail::diagnosis{world, fixed_world, devices_per_replica};
    return detail::diagnosis{};
  }();
  static_assert(detail::raise<structure_diag.id, structure_diag.a, structure_diag.b, structure_diag.c>());
  static_assert(!structure_diag.ok() || detail::layer_checks<layers>::value,
                "strata: a model entry is not a Layer (see the message above)");

  // ---- shapes and the loss ------------------------------------------------------------------
  static constexpr bool input_known = [] {
    if constexpr (input_option.rank > 0) {  // if constexpr: nvcc warns #128-D "loop is not reachable"
      return true;
    } else {
      for (int i = 0; i < num_layers; ++i) {
        const auto& d = descs[detail::idx(i)];
        if (d.in_shape.rank > 0) return true;
        if (d.role != layer_role::elementwise && d.role != layer_role::reshape && d.role != layer_role::residual_begin &&
            d.role != layer_role::residual_end)
          return d.role == layer_role::embedding;
      }
      return false;
    }
  }();

 public:
  // Per-sample input of the model: Input<...>, else the first shape-fixing layer's input.
  static constexpr shape_t input_shape = [] {
    if constexpr (input_option.rank > 0) {
      return input_option;
    } else {
      for (int i = 0; i < num_layers; ++i) {
        const auto& d = descs[detail::idx(i)];
        if (d.in_shape.rank > 0) return d.in_shape;
        if (d.role == layer_role::embedding) return shape_v<1>;
      }
      return shape_v<1>;
    }
  }();

 private:
  // The pipeline part of every layer.
  static constexpr auto layer_part = [] {
    std::array<int, static_cast<std::size_t>(num_layers) + 1> a{};
    for (int t = 0; t < num_taskgraphs; ++t) {
      const auto& tg = taskgraphs[detail::idx(t)];
      for (int i = tg.first_layer; i < tg.first_layer + tg.num_layers && i < num_layers; ++i) a[detail::idx(i)] = tg.part;
    }
    return a;
  }();
  static constexpr auto shapes = [] {
    std::array<std::array<shape_t, 2>, static_cast<std::size_t>(num_layers)> s{};
    shape_t cur = input_shape;
    for (int i = 0; i < num_layers; ++i) {
      s[detail::idx(i)][0] = cur;
      cur = descs[detail::idx(i)].out_shape(cur);
      s[detail::idx(i)][1] = cur;
    }
    return s;
  }();

  static constexpr detail::diagnosis model_diag = [] {
    using enum detail::rule_id;
    if (!input_known) return detail::diagnosis{input_shape};
    for (int i = 0; i < num_layers; ++i) {
      const auto& d = descs[detail::idx(i)];
      const shape_t in = shapes[detail::idx(i)][0];
      if (d.in_shape.rank > 0 && in.last() != d.in_shape.last())
        return detail::diagnosis{shapes_chain, i, in.last(), d.in_shape.last()};
      // layers that fix more than the feature axis (attention's sequence) check every axis,
      // once the input has as many
      if (d.in_shape.rank > 1 && in.rank < d.in_shape.rank) return detail::diagnosis{input_rank, i, in.rank, d.in_shape.rank};
      if (d.in_shape.rank > 1)
        for (int a = 0; a < d.in_shape.rank; ++a) {
          const int want = d.in_shape.dim[detail::idx(a)];
          const int got = in.dim[detail::idx(in.rank - d.in_shape.rank + a)];
          if (got != want) return detail::diagnosis{shapes_chain, i, got, want};
        }
    }
    int losses = 0;
    for (int i = 0; i < num_layers - (loss_from_option ? 1 : 0); ++i)
      if (descs[detail::idx(i)].role == layer_role::loss) ++losses;
    if (loss_from_option && losses > 0) return detail::diagnosis{loss_once, losses, 1};
    for (int i = 0; i < num_layers; ++i)
      if (descs[detail::idx(i)].role == layer_role::loss && i != num_layers - 1)
        return detail::diagnosis{loss_last, i, num_layers};
    if (num_layers == 0 || descs[detail::idx(num_layers - 1)].role != layer_role::loss)
      return detail::diagnosis{needs_loss};
    // residuals: the branch returns the input's shape, within one pipeline part
    std::array<int, static_cast<std::size_t>(num_layers) + 1> open{};
    int depth = 0;
    for (int i = 0; i < num_layers; ++i) {
      const layer_role r = descs[detail::idx(i)].role;
      if (r == layer_role::residual_begin) open[detail::idx(depth++)] = i;
      if (r != layer_role::residual_end) continue;
      if (depth == 0) return detail::diagnosis{residual_pairs, i, 0};
      const int b = open[detail::idx(--depth)];
      const long long got = shapes[detail::idx(i)][0].numel(), want = shapes[detail::idx(b)][0].numel();
      if (shapes[detail::idx(i)][0] != shapes[detail::idx(b)][0])
        return detail::diagnosis{residual_shape, i, static_cast<int>(got), static_cast<int>(want)};
      const int pb = layer_part[detail::idx(b)], pe = layer_part[detail::idx(i)];
      if (pb != pe) return detail::diagnosis{residual_part, b, pb, pe};
    }
    if (depth > 0) return detail::diagnosis{residual_pairs, open[detail::idx(depth - 1)], 1};
    return detail::diagnosis{};
  }();
  // The guard is part of the template argument: `ok || raise<...>()` would still instantiate raise<...>.
  static_assert(detail::raise<structure_diag.ok() ? model_diag.id : detail::rule_id::ok, model_diag.a, model_diag.b,
                              model_diag.c>());

  static constexpr auto sharded = [] {
    std::array<layer_plan, static_cast<std::size_t>(num_layers)> lp{};
    for (int t = 0; t < num_taskgraphs; ++t) {
      const auto& tg = taskgraphs[detail::idx(t)];
      for (int i = tg.first_layer; i < tg.first_layer + tg.num_layers && i < num_layers; ++i) {
        lp[detail::idx(i)].taskgraph = t;
        lp[detail::idx(i)].part = tg.part;
      }
    }
    for (int i = 0; i < num_layers; ++i) {
      lp[detail::idx(i)].desc = descs[detail::idx(i)];
      lp[detail::idx(i)].in = shapes[detail::idx(i)][0];
      lp[detail::idx(i)].out = shapes[detail::idx(i)][1];
    }
    // A model that breaks a structural or shape rule is reported by that rule alone.
    if (!structure_diag.ok() || !model_diag.ok()) {
      detail::shard_result<static_cast<std::size_t>(num_layers), static_cast<std::size_t>(num_taskgraphs)> r{};
      r.layers = lp;
      return r;
    }
    return detail::plan_shardings(lp, taskgraphs,
                                  detail::shard_inputs{mode, tensor_depth, micro_batch, sequence_parallel});
  }();

  static constexpr detail::diagnosis shard_diag = [] {
    using enum detail::rule_id;
    const shard_violation v = sharded.violation;
    switch (v.rule) {
      case shard_rule::ok: return detail::diagnosis{};
      case shard_rule::split_features: return detail::diagnosis{split_features, v.layer, v.value, v.n};
      case shard_rule::split_vocab: return detail::diagnosis{split_vocab, v.layer, v.value, v.n};
      case shard_rule::split_heads: return detail::diagnosis{split_heads, v.layer, v.value, v.n};
      case shard_rule::split_experts: return detail::diagnosis{split_experts, v.layer, v.value, v.n};
      case shard_rule::split_tokens: return detail::diagnosis{split_tokens, v.layer, v.value, v.n};
      case shard_rule::split_rows: return detail::diagnosis{split_rows, v.layer, v.value, v.n};
      case shard_rule::tensor_features: return detail::diagnosis{tensor_features, v.layer, v.value, v.n};
      case shard_rule::tensor_mode_layer: return detail::diagnosis{tensor_mode_layer, v.layer, v.value};
      case shard_rule::tensor_batch: return detail::diagnosis{tensor_batch, v.value, v.n};
      case shard_rule::tensor_residual: return detail::diagnosis{tensor_residual, v.layer};
    }
    return detail::diagnosis{};
  }();
  static_assert(detail::raise<structure_diag.ok() && model_diag.ok() ? shard_diag.id : detail::rule_id::ok,
                              shard_diag.a, shard_diag.b, shard_diag.c>());

 public:
  static constexpr std::array<layer_plan, static_cast<std::size_t>(num_layers)> layer_plans = sharded.layers;

  // ---- activation recomputation (plan/recompute.hpp) -----------------------------------------
 private:
  static constexpr auto recompute_plan_ = detail::plan_recompute(
      layer_plans, recompute, detail::items_info<items>::user_marks, detail::items_info<items>::block_marks);

 public:
  // The region each layer is recomputed in (−1: its activations are kept), and their number.
  static constexpr auto recompute_region = recompute_plan_.region;
  static constexpr int recompute_regions = recompute_plan_.regions;

  // ---- schedule -------------------------------------------------------------------------------
  static constexpr auto program = schedule_info::template build<stages, num_micro_batch>();
  // The schedule lowered with its buffer slots (sched::assign_slots): the action list the
  // executor runs, and the one the checks below prove.
  static constexpr auto lowered_program = sched::assign_slots<num_parts, num_micro_batch>(program);
  // Zero-bubble programs run each backward as B (input gradient) and, later, W (weights).
  static constexpr bool split_backward = program.split_backward;
  static constexpr sched::sim_result completeness = sched::check_complete(lowered_program.prog);
  static constexpr sched::sim_result simulation = sched::simulate(lowered_program.prog);

 private:
  static constexpr detail::diagnosis schedule_diag = [] {
    using enum detail::rule_id;
    if (split_backward && !sched::split_backward_allows(recompute_regions, zero, staged_weights))
      return detail::diagnosis{zero_bubble, recompute_regions, zero, staged_weights ? 1 : 0};
    if (completeness.status != sched::verdict::ok)
      return detail::diagnosis{schedule_complete, completeness.stage, completeness.instruction};
    if (simulation.status != sched::verdict::ok) return detail::diagnosis{deadlock, simulation.stage, simulation.instruction};
    return detail::diagnosis{};
  }();
  static_assert(detail::raise<structure_diag.ok() && model_diag.ok() && shard_diag.ok() ? schedule_diag.id
                                                                                       : detail::rule_id::ok,
                              schedule_diag.a, schedule_diag.b, schedule_diag.c>());

 public:
  static constexpr bool deadlock_free = simulation.status == sched::verdict::ok;
  static constexpr bool valid = structure_diag.ok() && model_diag.ok() && shard_diag.ok() && schedule_diag.ok();

  // ---- placement ------------------------------------------------------------------------------
  static constexpr int data_parallel(int world) { return world / devices_per_replica; }
  static constexpr int data_parallel() requires(fixed_world > 0) { return fixed_world / devices_per_replica; }
  static constexpr int global_batch(int world) { return data_parallel(world) * replica_batch; }

  // ---- what a data loader needs ------------------------------------------------------------
  // A replica's step: replica_batch samples, each input_elems values (input_shape, row-major;
  // token ids when an Embedding comes first) and labels_per_sample labels in [0, classes).
  static constexpr int replica_batch = micro_batch * num_micro_batch;
  static constexpr long long input_elems = input_shape.numel();
  static constexpr bool reads_token_ids = num_layers > 0 && descs[0].role == layer_role::embedding;
  // the embedding's vocabulary (token ids lie in [0, vocabulary)); 0 when the model reads no ids
  static constexpr long long vocabulary = reads_token_ids ? descs[0].params[0].shape.dim[0] : 0;
  // Elements of every logical parameter tensor (the model's size, before any split).
  static constexpr long long model_parameters = [] {
    long long n = 0;
    for (const layer_desc& d : descs)
      for (int k = 0; k < d.num_params; ++k) n += d.params[detail::idx(k)].shape.numel();
    return n;
  }();
  static constexpr long long labels_per_sample = [] {
    if constexpr (num_layers == 0) return 0LL;
    else {
      const shape_t in = layer_plans[detail::idx(num_layers - 1)].in;
      return in.last() > 0 ? in.rows() : 0LL;
    }
  }();
  static constexpr long long classes = [] {
    if constexpr (num_layers == 0) return 0LL;
    else return static_cast<long long>(layer_plans[detail::idx(num_layers - 1)].in.last());
  }();
  // Tensor-mesh factors of the Split TaskGraphs (1D: features split n ways).
  static constexpr detail::mesh_factors mesh = detail::mesh_of(mode, part_devices, tensor_depth);

  // Rank layout: rank = data · devices_per_replica + stage · part_devices + index.
  static constexpr rank_coord coord(int rank) {
    rank_coord c;
    c.data = rank / devices_per_replica;
    const int r = rank % devices_per_replica;
    c.stage = r / part_devices;
    c.index = r % part_devices;
    const int q = mode == tensor_mode::d1 ? part_devices : mesh.features;
    c.col = c.index % q;
    c.row = (c.index / q) % q;
    c.depth = mode == tensor_mode::d1 ? 0 : c.index / (q * q);
    if (mode == tensor_mode::d1) c.row = 0;
    return c;
  }
  static constexpr int rank_of(int data, int stage, int index) {
    return data * devices_per_replica + stage * part_devices + index;
  }
  // Whether `other` is in `rank`'s group along `axis` (world of `world` ranks).
  static constexpr bool same_group(group_axis axis, int rank, int other, int world) {
    if (other < 0 || other >= world) return false;
    const rank_coord a = coord(rank), b = coord(other);
    const int q = mode == tensor_mode::d1 ? part_devices : mesh.features;
    switch (axis) {
      case group_axis::part: return a.data == b.data && a.stage == b.stage;
      case group_axis::data: return a.stage == b.stage && a.index == b.index;
      case group_axis::pipeline: return a.data == b.data && a.index == b.index;
      case group_axis::part_data: return a.stage == b.stage;
      case group_axis::mesh_row: return a.data == b.data && a.stage == b.stage && a.depth == b.depth && a.row == b.row;
      case group_axis::mesh_col: return a.data == b.data && a.stage == b.stage && a.depth == b.depth && a.col == b.col;
      case group_axis::mesh_depth: return a.data == b.data && a.stage == b.stage && a.row == b.row && a.col == b.col;
      case group_axis::depth_data: return a.stage == b.stage && a.row == b.row && a.col == b.col;
      case group_axis::col_data: return a.stage == b.stage && a.col == b.col;
      case group_axis::plane_data: return a.stage == b.stage && a.depth == b.depth;
    }
    (void)q;
    return false;
  }
  // Devices of one replica's part in a gradient-reduction group along `axis` (the group
  // spans the data-parallel replicas too).
  static constexpr int reduction_devices(group_axis axis) {
    const int q = mode == tensor_mode::d1 ? part_devices : mesh.features;
    switch (axis) {
      case group_axis::part_data: return part_devices;
      case group_axis::depth_data: return part_devices / (q * q);
      case group_axis::col_data:
      case group_axis::plane_data: return part_devices / q;
      default: return 1;
    }
  }
  // The block of parameter k of layer `layer` that device `index` of its part holds
  // (exec::logical_index's numbering), and the first device of the part that holds the same
  // block: the one that writes it where one copy is wanted (checkpoints, gathers).
  static constexpr int param_block(int layer, int k, int index) {
    return detail::param_block(layer_plans[detail::idx(layer)], k, mode, mesh.features, index);
  }
  static constexpr int param_holder(int layer, int k, int index) {
    for (int d = 0; d < index; ++d)
      if (param_block(layer, k, d) == param_block(layer, k, index)) return d;
    return index;
  }
  // The block of layer `layer`'s input activation that device `index` holds (S(0,-1)).
  static constexpr detail::act_block input_block(int layer, int index) {
    return detail::block_of(mode, mesh.features, index, layer_plans[detail::idx(layer)].turned);
  }
  // Members of `rank`'s group along `axis`, in rank order, into out[]; returns the count.
  template <std::size_t N>
  static constexpr int group(group_axis axis, int rank, int world, std::array<int, N>& out) {
    int n = 0;
    for (int r = 0; r < world; ++r)
      if (same_group(axis, rank, r, world) && n < static_cast<int>(N)) out[detail::idx(n++)] = r;
    return n;
  }

  // ---- analyses (all constexpr) ------------------------------------------------------------
  static constexpr sched::fraction bubble = sched::bubble_of(program, sched::unit_costs(program));
  static constexpr double bubble_fraction = bubble.value();
  static constexpr int peak_in_flight(int stage) { return sched::peak_in_flight(program, stage); }

  // Parameter elements this device holds for pipeline part `part`.
  static constexpr long long part_param_elems(int part) {
    long long n = 0;
    for (const auto& lp : layer_plans)
      if (lp.part == part) n += lp.local_param_elems;
    return n;
  }
  static constexpr long long stage_param_elems(int stage) {
    long long n = 0;
    for (int c = 0; c < chunks; ++c) n += part_param_elems(part_of(stage, c));
    return n;
  }
  // ---- memory of parameters, gradients and optimizer state (plan/memory.hpp) ----------
  // `dp`: the data-parallel degree (0: unknown, counted as 1), which ZeRO divides by.
  // The largest TaskGraph's parameter elements on a device of `stage`: a staging slot.
  static constexpr long long staging_elems(int stage) { return detail::staging_elems<Plan>(stage); }
  static constexpr long long parameter_bytes(int stage, int dp = default_dp) {
    return detail::parameter_bytes<Plan>(stage, dp);
  }
  static constexpr long long host_bytes(int stage, int dp = default_dp) { return detail::host_bytes<Plan>(stage, dp); }
  static constexpr long long update_buffer_bytes(int stage, int dp = default_dp) {
    return detail::update_buffer_bytes<Plan>(stage, dp);
  }
  static constexpr long long gradient_bytes(int stage, int dp = default_dp) {
    return detail::gradient_bytes<Plan>(stage, dp);
  }
  static constexpr long long optimizer_state_elems(int stage, int dp = default_dp) {
    return detail::optimizer_state_elems<Plan>(stage, dp);
  }
  static constexpr long long adam_state_bytes(int stage, int dp = default_dp) {
    return detail::adam_state_bytes<Plan>(stage, dp);
  }
  // ---- memory: read off the lowered buffer plan (plan/lower.hpp) -----------------------
  // Note the index each function takes: a pipeline *part* (Pipeline<...>'s k-th
  // argument) or a physical *stage* (with Interleaved<V>, stage s runs parts s,
  // s + stages, ...).
  using lowering = lower::lowered<Plan>;
  // Activation bytes one micro-batch keeps on a device of `part` from its forward to its
  // backward: the part's input, the inputs its layers keep, their stashed statistics and ids.
  static constexpr long long stash_bytes(int part) { return lowering::stash_bytes(part, element_bytes, stat_bytes); }
  // Largest stash a device of `stage` holds: each part's stash times the micro-batches
  // its program keeps in flight at once.
  static constexpr long long peak_activation_bytes(int stage) {
    return lowering::peak_stash_bytes(stage, element_bytes, stat_bytes);
  }
  // Every activation buffer a device of `stage` allocates: the stash slots, messages
  // waiting to be sent or consumed, and the work region (transients, conversion
  // staging, scratch) — exactly what the executor allocates.
  static constexpr long long activation_arena_bytes(int stage) {
    return lowering::arena_bytes(stage, element_bytes, stat_bytes);
  }
  static constexpr long long peak_memory_bytes(int stage, int dp = default_dp) {
    return parameter_bytes(stage, dp) + gradient_bytes(stage, dp) + adam_state_bytes(stage, dp) +
           update_buffer_bytes(stage, dp) + activation_arena_bytes(stage);
  }

  // Model FLOPs of one replica per step (forward + backward, all devices of the replica).
  static constexpr long long flops_per_replica_step() {
    long long f = 0;
    for (const auto& lp : layer_plans) f += lp.desc.forward_flops(lp.in) + lp.desc.backward_flops(lp.in);
    return f * replica_batch;
  }
  static constexpr long long flops_per_step(int world) { return flops_per_replica_step() * data_parallel(world); }
  // FLOPs one device of `stage` executes per step.
  static constexpr long long device_flops_per_step(int stage) {
    long long f = 0;
    for (const auto& lp : layer_plans)
      if (stage_of_part(lp.part) == stage) f += lp.local_flops_per_sample;
    return f * replica_batch;
  }

  // Every collective a device of `stage` takes part in per step, with its bytes (the
  // larger local buffer of each call, as comm_desc counts), read off the lowered
  // program: the layout conversions and layers' own collectives per micro-batch, the
  // pipeline messages this stage sends, and the gradient buckets. `dp` is the
  // data-parallel degree; a reduction over a group of one device is no traffic and is
  // not listed. With dp = 0 (unknown: the default unless the plan fixes World<N>)
  // data-group reductions are listed as for any dp > 1.
  static constexpr int max_comms = 4 * num_layers + max_layer_comms * num_layers + 4 * num_parts + 2 * buckets + 4;
  struct comm_table {
    std::array<comm_total, static_cast<std::size_t>(max_comms)> rows{};
    int size = 0;
  };
  static constexpr int default_dp = fixed_world > 0 ? fixed_world / devices_per_replica : 0;
  static constexpr comm_table communication(int stage, int dp = default_dp) {
    return communication_of(stage, dp, element_bytes, stat_bytes, master_bytes);
  }
  // The same for a trainer whose compute type is not the plan's Element<T>: the bytes of
  // its activations (t_bytes), statistics and masters.
  static constexpr comm_table communication_of(int stage, int dp, long long t_bytes, long long s_bytes,
                                               long long m_bytes) {
    comm_table t;
    detail::list_communication<Plan>(t, stage, dp, t_bytes, s_bytes, m_bytes);  // plan/communication.hpp
    return t;
  }
  static constexpr long long communication_bytes(int stage, int dp = default_dp) {
    const comm_table t = communication(stage, dp);
    long long b = 0;
    for (int i = 0; i < t.size; ++i) b += t.rows[detail::idx(i)].bytes;
    return b;
  }
  // The step's loss books (Σ loss, correct rows, rows: 3 doubles) are all-reduced over
  // the world once per step, beside the traffic above.
  static constexpr long long loss_books_bytes = 3 * 8;
};

}  // namespace strata
