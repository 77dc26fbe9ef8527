#pragma once
// Pass 1, structure: the options read, the model's items and layers, its TaskGraphs and
// pipeline parts, the stages they run on — and the structural rules (nesting, device
// counts, the schedule's own conditions, World<N>).
#include <array>
#include <string_view>
#include <type_traits>

#include "strata/core/diagnosis.hpp"
#include "strata/core/precision.hpp"
#include "strata/core/rules.hpp"
#include "strata/layers/layer.hpp"
#include "strata/plan/auto_stages.hpp"
#include "strata/plan/model.hpp"
#include "strata/plan/options_parse.hpp"
#include "strata/plan/schedule.hpp"
#include "strata/strategy/options.hpp"
#include "strata/strategy/strategy.hpp"

namespace strata {

struct NoLoss {};

namespace detail {

template <class L>
constexpr layer_desc describe_any() {
  if constexpr (Layer<L>) return describe<L>();
  else return layer_desc{};
}

template <class List>
struct layer_checks;
template <class... L>
struct layer_checks<type_list<L...>> {
  // The first entry that is neither a Layer nor an annotation (annotations: the nesting
  // rule speaks), −1 if none; an array, not a fold: a fold over 257 layers exceeds clang's
  // expression nesting limit.
  static constexpr int first_bad = [] {
    constexpr std::array<bool, sizeof...(L) + 1> ok{(Layer<L> || is_annotation_v<L>)..., true};
    for (std::size_t i = 0; i < sizeof...(L); ++i)
      if (!ok[i]) return static_cast<int>(i);
    return -1;
  }();
  // The Layer concept's requirements of that entry, as the rule type to instantiate.
  static constexpr auto rule() {
    if constexpr (first_bad >= 0)
      return std::type_identity<layer_requirements<nth_t<static_cast<std::size_t>(first_bad), L...>>>{};
    else return std::type_identity<no_rule>{};
  }
  static constexpr std::array<layer_desc, sizeof...(L)> descs{describe_any<L>()...};
};

// Default<S> and Element<T>: the rule each breaks, as a type (options_parse.hpp's no_rule if none).
template <class S>
constexpr auto default_rule() {
  if constexpr (is_strategy_v<S>) {
    if constexpr (S::layers::size == 0) return std::type_identity<no_rule>{};
    else return std::type_identity<rule::default_is_strategy<S>>{};
  } else {
    return std::type_identity<rule::default_is_strategy<S>>{};
  }
}
template <class T>
constexpr auto element_rule() {
  if constexpr (is_precision_v<T>) return std::type_identity<no_rule>{};
  else return std::type_identity<rule::element_type_supported<T>>{};
}
template <class... Rules>
struct first_rule {
  using type = no_rule;
};
template <class R, class... Rules>
struct first_rule<R, Rules...> {
  using type = std::conditional_t<std::is_same_v<R, no_rule>, typename first_rule<Rules...>::type, R>;
};

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
                                                          bool default_context, int default_tensor,
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
      tgs[idx(t)].context = items[i].bare ? default_context : items[i].context;
      tgs[idx(t)].tensor = items[i].bare ? default_tensor : items[i].tensor;
    }
    tgs[idx(t)].num_layers += items[i].num_layers;
    layer += items[i].num_layers;
  }
  if (extra_loss_layer && NT > 0) tgs[NT - 1].num_layers += 1;
  return tgs;
}

template <class Net, class... Options>
struct structure_pass {
  // ---- options -------------------------------------------------------------------------
  // The option rules are checked in one place each: the first broken rule about the option
  // types here, the first about their values in options_diag (raised with the structure).
  using default_strategy = typename pick_t<option_kind::default_strategy, Default<Replicate<1>>, Options...>::type;
  using element_option_t = typename pick_t<option_kind::element, Element<float>, Options...>::type;
  using type_rule = typename first_rule<option_rule_t<Options...>,
                                        typename decltype(default_rule<default_strategy>())::type,
                                        typename decltype(element_rule<element_option_t>())::type>::type;
  static_assert(sizeof(type_rule) != 0);
  using schedule_t = typename pick_t<option_kind::schedule, Schedule<PreferBackward>, Options...>::type;
  using loss_option_t = typename pick_t<option_kind::loss, Loss<NoLoss>, Options...>::type;
  using tensor_t = pick_t<option_kind::tensor_mode, Tensor1D, Options...>;
  using element_type = std::conditional_t<std::is_same_v<type_rule, no_rule>, element_option_t, float>;

  static constexpr int micro_batch = pick_t<option_kind::micro_batch, MicroBatch<1>, Options...>::value;
  static constexpr int num_micro_batch = pick_t<option_kind::num_micro_batch, NumMicroBatch<1>, Options...>::value;
  // A replica's step: replica_batch samples.
  static constexpr int replica_batch = micro_batch * num_micro_batch;
  // The schedule's builder, name and traits, read the same way for every tag (plan/schedule_traits.hpp).
  using schedule_info = sched::schedule_traits<schedule_t>;
  static constexpr std::string_view schedule_name = schedule_info::name;
  static constexpr int chunks = schedule_info::chunks;
  static constexpr int fixed_world = pick_t<option_kind::world, World<0>, Options...>::value;
  static constexpr tensor_mode mode = tensor_t::mode;
  static constexpr int tensor_depth = tensor_t::depth;
  static constexpr reduce_method gradient_reduce =
      pick_t<option_kind::gradient_reduce, GradientReduce<ReduceMean>, Options...>::method;
  static constexpr int buckets = pick_t<option_kind::buckets, Buckets<5>, Options...>::value;
  static constexpr int zero = pick_t<option_kind::zero, Zero<0>, Options...>::value;
  static constexpr int apply_groups = pick_t<option_kind::apply_groups, ApplyGroups<1>, Options...>::value;
  static constexpr offload_level offload = pick_t<option_kind::offload, Offload<offload_level::none>, Options...>::value;
  static constexpr bool cast_weights_per_use = pick_t<option_kind::weight_copies, KeepWeightCopies, Options...>::value;
  // Layers read their TaskGraph's weights from a staging buffer (exec/store.hpp); under
  // Zero<3> it is filled by an all-gather of the TaskGraph's partitioned parameters.
  static constexpr bool staged_weights = offload != offload_level::none || cast_weights_per_use || zero >= 3;
  // HalfGradientReduce<S>: S, or 0 for reductions in master precision.
  static constexpr int half_reduce = pick_t<option_kind::half_reduce, FullGradientReduce, Options...>::value;
  // AMP O1: an Element<f16> plan scales its loss dynamically unless it says otherwise.
  using loss_scale = typename pick_t<
      option_kind::loss_scale, LossScale<std::conditional_t<std::is_same_v<element_type, f16>, DynamicScale<>, NoScale>>,
      Options...>::type;
  static constexpr bool sequence_parallel = pick_t<option_kind::sequence_parallel, NoSequenceParallel, Options...>::value;
  static constexpr context_mode context_exchange =
      pick_t<option_kind::context_exchange, ContextAllGather, Options...>::value;
  static constexpr bool context_exchange_given =
      decltype(hana::length(options_of<option_kind::context_exchange, Options...>()))::value > 0;
  static constexpr checkpoint_mode recompute =
      pick_t<option_kind::gradient_checkpoint, GradientCheckpoint<checkpoint_mode::collection>, Options...>::value;
  // Element<T> is the training precision (make_trainer's default T): activations and the
  // weights layers read in T, master weights, gradients and optimizer state in master_t<T>
  // (float for bf16), so the analyses count each in its own type.
  static constexpr long long element_bytes = static_cast<long long>(sizeof(element_type));
  static constexpr long long master_bytes = static_cast<long long>(sizeof(master_t<element_type>));
  static constexpr long long stat_bytes = static_cast<long long>(sizeof(stat_t<element_type>));
  static constexpr bool mixed_precision = is_mixed_v<element_type>;
  static constexpr bool loss_from_option = !std::is_same_v<loss_option_t, NoLoss>;
  // The first option value that breaks its rule.
  static constexpr diagnosis options_diag = [] {
    if constexpr (!std::is_same_v<type_rule, no_rule>) return diagnosis{rule_id::reported};
    else {
      const diagnosis found[] = {
          check<rule_id::micro_batch, micro_batch>(),
          check<rule_id::num_micro_batch, num_micro_batch>(),
          check<rule_id::interleave_chunks, chunks>(),
          check<rule_id::buckets, buckets>(),
          check<rule_id::zero_level, zero>(),
          check<rule_id::apply_groups, apply_groups>(),
          check<rule_id::half_reduce_scale, half_reduce == 0 ? 1 : half_reduce>(),
          check<rule_id::loss_scale, static_cast<int>(loss_scale::kind), loss_scale::log2_init,
                loss_scale::growth_interval, static_cast<long long>(loss_scale::initial)>()};
      for (const diagnosis& d : found)
        if (!d.ok()) return d;
      return diagnosis{};
    }
  }();
  static constexpr shape_t input_option = pick_t<option_kind::input, Input<>, Options...>::shape;

  // ---- model: items, layers, TaskGraphs, parts --------------------------------------------
  // The network planned: Net as written, or with AutoStages<K> the Pipeline the planner
  // cut it into (plan/auto_stages.hpp).
  using net = resolve_net_t<Net, Options...>;
  using traits = net_traits<net>;
  using items = typename traits::items;
  using model_layers = typename items_info<items>::layers;
  using layers = std::conditional_t<loss_from_option, concat_t<model_layers, type_list<loss_option_t>>, model_layers>;
  static constexpr int num_items = items::size;
  static constexpr int num_layers = layers::size;
  static constexpr auto item_descs = items_info<items>::value;

  static constexpr std::array<layer_desc, idx(num_layers)> descs = layer_checks<layers>::descs;

  static constexpr int default_devices = [] {
    if constexpr (is_strategy_v<default_strategy>) return default_strategy::devices;
    else return 1;
  }();
  static constexpr strategy_kind default_kind = [] {
    if constexpr (is_strategy_v<default_strategy>) return default_strategy::kind;
    else return strategy_kind::replicate;
  }();
  static constexpr bool default_context = is_context_v<default_strategy>;
  static constexpr int default_tensor = [] {
    if constexpr (is_context_v<default_strategy>) return default_strategy::tensor;
    else return 1;
  }();

  static constexpr auto item_part = [] {
    std::array<int, idx(num_items)> a{};
    if constexpr (traits::explicit_parts)
      for (int i = 0; i < num_items; ++i) a[idx(i)] = traits::item_part[idx(i)];
    return a;
  }();
  static constexpr int num_taskgraphs = count_taskgraphs(item_descs, item_part, traits::explicit_parts);
  static constexpr std::array<taskgraph_desc, idx(num_taskgraphs)> taskgraphs = build_taskgraphs<idx(num_taskgraphs)>(
      item_descs, item_part, traits::explicit_parts, default_kind, default_devices, default_context, default_tensor, loss_from_option);
  // Context<N>: the devices of a part split every sample's positions N ways (1: no context split)
  static constexpr int context = num_taskgraphs > 0 ? taskgraphs[0].context_ways() : 1;
  // Context<N, Split<T>>: T, the tensor-parallel devices of one context index (1: none); the
  // part's device c·T + t holds context piece(s) c and tensor shard t
  // (Context<1, Split<T>> is Split<T>)
  static constexpr int context_tensor =
      context > 1 && num_taskgraphs > 0 && taskgraphs[0].context ? max1(taskgraphs[0].tensor) : 1;
  static constexpr int num_parts = traits::explicit_parts ? traits::num_parts : num_taskgraphs;
  // Physical pipeline stages: with V chunks, part k runs on stage k mod stages as chunk k / stages;
  // a V placement (ZeroBubbleV) puts the second chunk in reverse: stage s runs parts s and 2·stages − 1 − s.
  static constexpr int stages = max1(num_parts / max1(chunks));
  static constexpr bool v_shape = schedule_info::v_shape;
  static constexpr int part_devices = num_taskgraphs > 0 ? max1(taskgraphs[0].devices) : 1;
  static constexpr int devices_per_replica = stages * part_devices;

  // ---- structural rules ---------------------------------------------------------------------
  static constexpr diagnosis structure_diag = [] {
    if (!options_diag.ok()) return options_diag;
    // a type rule (a non-Layer entry, a broken AutoStages) was raised where it was checked
    if (layer_checks<layers>::first_bad >= 0 || !resolve_net_for<Net, Options...>::ok)
      return diagnosis{rule_id::reported};
    for (int i = 0; i < num_items; ++i) {
      const auto& it = item_descs[idx(i)];
      if (it.group) return diagnosis{rule_id::nested_group, i};
      if (!it.bare && it.devices < 1) return diagnosis{rule_id::device_count, it.devices};
      if (it.nested_at >= 0) return diagnosis{rule_id::nested, it.devices, it.nested_at};
    }
    if (default_devices < 1) return diagnosis{rule_id::device_count, default_devices};
    if (traits::empty_part >= 0) return diagnosis{rule_id::empty_stage, traits::empty_part};
    for (int t = 0; t < num_taskgraphs; ++t)
      if (taskgraphs[idx(t)].num_layers == 0) return diagnosis{rule_id::empty_taskgraph, t};
    for (int t = 1; t < num_taskgraphs; ++t) {
      const auto& tg = taskgraphs[idx(t)];
      int first = t;  // first TaskGraph of the same part
      while (first > 0 && taskgraphs[idx(first - 1)].part == tg.part) --first;
      if (first != t && tg.devices != taskgraphs[idx(first)].devices)
        return diagnosis{rule_id::colocate_devices, t, tg.devices, taskgraphs[idx(first)].devices};
      if (first == t && tg.devices != taskgraphs[0].devices)
        return diagnosis{rule_id::stage_devices, tg.part, tg.devices, taskgraphs[0].devices};
    }
    for (int t = 0; t < num_taskgraphs; ++t) {
      const auto& tg = taskgraphs[idx(t)];
      if (tg.context != taskgraphs[0].context || tg.tensor != taskgraphs[0].tensor)
        return diagnosis{rule_id::context_uniform, t};
      if (tg.context && tg.tensor > 1 && mode != tensor_mode::d1)
        return diagnosis{rule_id::context_tensor_mode, static_cast<int>(mode)};
      if (context_exchange_given && !tg.context) return diagnosis{rule_id::context_exchange, t};
      if (tg.kind == strategy_kind::replicate && !tg.context && tg.devices > 1 && micro_batch % tg.devices != 0)
        return diagnosis{rule_id::replicate_batch, micro_batch, tg.devices};
      if (tg.kind == strategy_kind::split && tg.devices > 1) {
        const int n = tg.devices;
        if (mode == tensor_mode::d2 && isqrt(n) * isqrt(n) != n) return diagnosis{rule_id::tensor_2d, n};
        if (mode == tensor_mode::d2p5) {
          const int d = tensor_depth;
          const int q = d > 0 && n % d == 0 ? isqrt(n / d) : 0;
          if (d < 1 || q * q * d != n || q < 1) return diagnosis{rule_id::tensor_2p5d, n, d};
        }
        if (mode == tensor_mode::d3 && icbrt(n) * icbrt(n) * icbrt(n) != n) return diagnosis{rule_id::tensor_3d, n};
        if (mode != tensor_mode::d1 && zero > 0) return diagnosis{rule_id::tensor_zero, static_cast<int>(mode), zero};
      }
    }
    if (const diagnosis d = schedule_info::check(num_parts, stages, num_micro_batch); !d.ok()) return d;
    if (fixed_world != 0 && (fixed_world < devices_per_replica || fixed_world % devices_per_replica != 0))
      return diagnosis{rule_id::world, fixed_world, devices_per_replica};
    return diagnosis{};
  }();
  static_assert(sizeof(raised<structure_diag.id, structure_diag.a, structure_diag.b, structure_diag.c,
                              structure_diag.d>) != 0);
  // A model entry that is not a Layer: the concept's requirements name what it lacks.
  static_assert(sizeof(typename decltype(layer_checks<layers>::rule())::type) != 0);
};

}  // namespace detail
}  // namespace strata
