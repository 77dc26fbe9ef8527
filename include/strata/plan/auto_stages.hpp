#pragma once
// AutoStages<K>: the planner cuts an unannotated model into K pipeline stages itself.
//
// The units it may cut between are the model's top-level items (each copy of a top-level
// Repeat<N, ...> one unit, so a Residual block is never cut). A probe plan — the whole
// model on one stage, with the plan's other options — gives every unit's cost and memory
// from the planner's own analyses: forward + backward FLOPs (and the recomputed forward
// under GradientCheckpoint), parameter/gradient/Adam bytes, what a micro-batch keeps
// from forward to backward (the lowered plan's buffer needs) and the work buffers.
// plan/partition.hpp then picks the cut whose most expensive stage is cheapest among
// those whose every stage fits MemoryBudget (with each stage's micro-batches in flight
// under the schedule), and the resulting Pipeline<...> is an ordinary plan. A long Repeat
// enters the probe as four copies where its middle copies cost alike (plan/units.hpp).
//
// Types are produced only for the result (slices of the unit list by index, constant
// depth); everything else is constexpr arrays.
#include <array>
#include <cstddef>
#include <type_traits>
#include <utility>

#include "strata/core/diagnosis.hpp"
#include "strata/core/typelist.hpp"
#include "strata/layers/residual.hpp"
#include "strata/plan/lower/tables.hpp"
#include "strata/plan/model.hpp"
#include "strata/plan/options_parse.hpp"
#include "strata/plan/partition.hpp"
#include "strata/plan/schedule.hpp"
#include "strata/plan/sharding.hpp"
#include "strata/plan/units.hpp"
#include "strata/strategy/options.hpp"
#include "strata/strategy/strategy.hpp"

namespace strata {
template <class Net, class... Options>
struct Plan;
}  // namespace strata

namespace strata::detail {

// The plan's options without AutoStages, MemoryBudget and the schedule: the probe's. A
// one-chunk schedule that splits backwards (ZB-H1) stays: its stash keeps output
// gradients for W, which the probe's per-unit memory must count.
template <class O>
constexpr bool probe_drops() {
  if constexpr (option_is<O>(option_kind::auto_stages) || option_is<O>(option_kind::memory_budget)) {
    return true;
  } else if constexpr (option_is<O>(option_kind::schedule)) {
    using info = sched::schedule_traits<typename O::type>;
    return !info::split_backward || info::chunks != 1;
  } else {
    return false;
  }
}
template <class O>
using probe_option_t = std::conditional_t<probe_drops<O>(), type_list<>, type_list<O>>;
template <class Net, class List>
struct plan_of;
template <class Net, class... O>
struct plan_of<Net, type_list<O...>> {
  using type = Plan<Net, O...>;
};

// The probe plan, built only when the AutoStages rules hold.
template <bool Ok, class Net, class OptionList>
struct probe_of {
  using type = void;
};
template <class Net, class OptionList>
struct probe_of<true, Net, OptionList> {
  using type = typename plan_of<Net, OptionList>::type;
};

// Each unit's memory and cost, read off a probe plan holding the whole model as one stage:
// units [first[u], first[u + 1]) of its flat layers (the loss, if any, joins the last one).
template <class Probe, std::size_t NU>
constexpr unit_costs<NU> unit_costs_of(const std::array<int, NU + 1>& first, int num_units) {
  unit_costs<NU> c{};
  const auto& T = Probe::lowering::tables;
  const long long eb = Probe::element_bytes, sb = Probe::stat_bytes, mb = Probe::master_bytes;
  const long long per_param = (Probe::mixed_precision ? mb + eb : eb) + mb + 2 * mb;  // weights, grads, Adam
  // (arrays through pointers: a constant evaluator allocates a frame per operator[] call)
  const strata::layer_plan* plans = Probe::layer_plans.data();
  const auto* calls = T.calls.data();
  const int* regions = Probe::recompute_region.data();
  for (int u = 0; u < num_units; ++u) {
    const auto x = static_cast<std::size_t>(u);
    const int lo = first[x];
    const int hi = u + 1 == num_units ? Probe::num_layers : first[x + 1];  // the loss joins the last unit
    long long region_bytes = 0, region_stats = 0, depth = 0;
    for (int i = lo; i < hi; ++i) {
      const strata::layer_plan& lp = plans[i];
      const auto& call = calls[i];
      // the skip slots its residuals hold while a backward runs (plan/lower/parts.hpp)
      if (lp.desc.role == layer_role::residual_begin && ++depth > c.skip_levels[x]) c.skip_levels[x] = depth;
      if (lp.desc.role == layer_role::residual_end) --depth;
      if (call.needs.backward_values * eb > c.skip[x]) c.skip[x] = call.needs.backward_values * eb;
      const long long in_elems = call.dims.rows * call.dims.in_cols;
      const long long out_elems = call.dims.out_rows * call.dims.out_cols;
      long long flops = lp.local_flops_per_sample;
      const int region = regions[i];
      const bool regather = lower::regathers_at(calls, regions, i);
      if (region >= 0) {  // the forward runs again in the backward
        const long long f = lp.desc.forward_flops(lp.in), b = lp.desc.backward_flops(lp.in);
        if (f + b > 0) flops += static_cast<long long>(static_cast<double>(lp.local_flops_per_sample) * f / (f + b));
        const bool region_first = i == lo || regions[i - 1] != region;
        if (region_first) {
          c.act[x] += in_elems * eb;  // a region keeps only its input ...
          region_bytes = in_elems * eb;  // (and may hold its input converted)
          region_stats = 0;
        }
        // ... and writes the rest into the stage's recompute buffers, one region at a time
        region_bytes += call.needs.stash_values * eb + call.needs.stash_ids * 4 + out_elems * eb;
        region_stats += call.needs.stash_stats * sb;
        c.recompute[x] = region_bytes > c.recompute[x] ? region_bytes : c.recompute[x];
        c.recompute_stats[x] = region_stats > c.recompute_stats[x] ? region_stats : c.recompute_stats[x];
      } else {
        // a row split gathered again keeps the split, and gathers into the stage's buffer
        c.act[x] += call.needs.stash_values * eb + call.needs.stash_stats * sb + call.needs.stash_ids * 4 +
                    (call.needs.keep_input ? (regather ? call.arrived_elems : in_elems) * eb : 0);
        if (regather && in_elems * eb > c.gathered[x]) c.gathered[x] = in_elems * eb;
      }
      // a zero-bubble schedule keeps the output's gradient (at most) and B's leftovers until W
      if (!call.dy_keep.empty()) c.act[x] += out_elems * eb + call.keep.elems * eb;
      c.cost[x] += flops * Probe::replica_batch;
      c.state[x] += lp.local_param_elems * per_param;
      const long long big = (in_elems > out_elems ? in_elems : out_elems) * eb;
      const long long scratch = call.needs.scratch_values * eb, scratch_stats = call.needs.scratch_stats * sb;
      c.ping[x] = big > c.ping[x] ? big : c.ping[x];
      c.scratch[x] = scratch > c.scratch[x] ? scratch : c.scratch[x];
      c.scratch_stats[x] = scratch_stats > c.scratch_stats[x] ? scratch_stats : c.scratch_stats[x];
      if (i == lo && !call.reads_ids) c.entry[x] = in_elems * eb;
      if (i == hi - 1 && !call.loss) c.exit[x] = out_elems * eb;
      if (i == hi - 1 && region >= 0) {  // out of its region when it ends a stage
        c.tail[x] = call.needs.stash_values * eb + call.needs.stash_stats * sb + call.needs.stash_ids * 4 +
                    (call.needs.keep_input ? (call.regather ? call.arrived_elems : in_elems) * eb : 0);
        if (call.regather && in_elems * eb > c.gathered[x]) c.gathered[x] = in_elems * eb;
      }
    }
  }
  return c;
}

template <class Net, class... Options>
struct auto_stages {
  static constexpr int K = pick_t<option_kind::auto_stages, AutoStages<0>, Options...>::value;
  static constexpr long long budget = pick_t<option_kind::memory_budget, MemoryBudget<0>, Options...>::bytes;
  using schedule =
      sched::schedule_traits<typename pick_t<option_kind::schedule, Schedule<PreferBackward>, Options...>::type>;
  using model = auto_model<Net>;
  using units = typename model::units;
  static constexpr int num_units = units::size;

  // The three rules about K, the model and the schedule, in this order; the first broken
  // one is raised alone, and nothing is probed or cut after it.
  static constexpr diagnosis rules_diag = [] {
    if (!model::unannotated) return diagnosis{rule_id::auto_stages_model, 0};
    if (K < 1 || K > num_units) return diagnosis{rule_id::auto_stages_count, K, num_units};
    if (schedule::chunks != 1) return diagnosis{rule_id::auto_stages_schedule, schedule::chunks};
    return diagnosis{};
  }();
  static_assert(sizeof(raised<rules_diag.id, rules_diag.a, rules_diag.b, rules_diag.c, rules_diag.d>) != 0);
  static constexpr bool ok = rules_diag.ok();
  static constexpr int stages = ok ? K : 1;
  static constexpr std::size_t NU = static_cast<std::size_t>(num_units > 0 ? num_units : 1);

  // ---- the probe: the whole model as one stage, a long Repeat as four copies (units.hpp) ----
  using probe_options = concat_t<probe_option_t<Options>...>;
  using whole_probe = typename probe_of<ok, typename whole_part<units, model::template part>::type, probe_options>::type;
  using short_units = probe_units_of<typename model::items>;
  static_assert(short_units::model_units == units::size);
  static constexpr std::size_t NP = short_units::units::size > 0 ? short_units::units::size : 1;
  using short_probe = typename probe_of<(ok && short_units::shortened > 0),
                                        typename whole_part<typename short_units::units, model::template part>::type,
                                        probe_options>::type;

  // first flat layer of each unit (first[num_units] = the model's layers; the loss after)
  static constexpr auto first = [] {
    std::array<int, NU + 1> f{};
    if constexpr (num_units > 0) f = unit_firsts(units{});
    return f;
  }();
  static constexpr auto short_first = unit_firsts(typename short_units::units{});
  static constexpr unit_costs<NP> short_costs = [] {
    if constexpr (ok && short_units::shortened > 0) return unit_costs_of<short_probe, NP>(short_first, static_cast<int>(NP));
    else return unit_costs<NP>{};
  }();
  // the twins planned and costing alike: every middle copy costs what the second does
  static constexpr bool shortened = [] {
    if constexpr (ok && short_units::shortened > 0) {
      for (const auto& tw : short_units::map.twins)
        if (!twin_layers_alike<short_probe, NP>(short_first, tw.second, tw.period) ||
            !twin_costs_alike(short_costs, tw.second, tw.period))
          return false;
      return true;
    } else {
      return false;
    }
  }();
  using probe = std::conditional_t<shortened, short_probe, whole_probe>;

  static constexpr unit_costs<NU> costs = [] {
    if constexpr (!ok) return unit_costs<NU>{};
    else if constexpr (shortened) return spread_costs<NU, NP>(short_costs, short_units::map.unit);
    else return unit_costs_of<whole_probe, NU>(first, num_units);
  }();

  // micro-batches each stage keeps in flight under the plan's schedule (its program on K
  // stages; none counted when a rule above has spoken)
  static constexpr auto in_flight = [] {
    std::array<long long, static_cast<std::size_t>(stages)> f{};
    if constexpr (ok) {
      const auto prog = schedule::template build<stages, probe::num_micro_batch>();
      for (int s = 0; s < stages; ++s) f[static_cast<std::size_t>(s)] = sched::peak_in_flight(prog, s);
    }
    return f;
  }();

  static constexpr cut_result<static_cast<std::size_t>(stages)> cut = best_cut(costs, in_flight, budget);
  static constexpr cut_result<static_cast<std::size_t>(stages)> least_memory =
      best_cut(costs, in_flight, 0, cut_goal::least_memory);
  static constexpr long long mib(long long b) { return (b + (1LL << 20) - 1) >> 20; }
  // [auto-stages-memory], raised by resolve_net once this class is complete
  using memory_rule = raised<ok && !cut.fits ? rule_id::auto_stages_memory : rule_id::ok, K,
                             mib(least_memory.fullest), budget / (1LL << 20), 0>;

  // first unit of each stage (a cut that fits, else an even one so only the rule speaks)
  static constexpr std::array<int, static_cast<std::size_t>(stages) + 1> cuts = [] {
    if (cut.fits) return cut.cuts;
    std::array<int, static_cast<std::size_t>(stages) + 1> c{};
    for (int s = 0; s <= stages; ++s) c[static_cast<std::size_t>(s)] = ok ? s * num_units / stages : (s ? num_units : 0);
    return c;
  }();

  template <std::size_t... S>
  static auto make(std::index_sequence<S...>)
      -> Pipeline<slice_t<model::template part, units, cuts[S], cuts[S + 1]>...>;
  using type = decltype(make(std::make_index_sequence<static_cast<std::size_t>(stages)>{}));
};

// The network a Plan plans: Net itself, or with AutoStages<K> the Pipeline cut from it.
template <bool Ok, class Cut, class Net>
struct cut_net {
  using type = Net;
};
template <class Cut, class Net>
struct cut_net<true, Cut, Net> {
  using type = typename Cut::type;
};
template <bool Auto, class Net, class... Options>
struct resolve_net {
  using type = Net;
  static constexpr bool ok = true;
};
template <class Net, class... Options>
struct resolve_net<true, Net, Options...> {
  using cut = auto_stages<Net, Options...>;
  static_assert(sizeof(typename cut::memory_rule) != 0);
  // a broken AutoStages rule has been raised; the plan reports nothing after it
  static constexpr bool ok = cut::ok && cut::cut.fits;
  using type = typename cut_net<cut::ok, cut, Net>::type;
};
template <class Net, class... Options>
using resolve_net_for =
    resolve_net<(decltype(hana::length(options_of<option_kind::auto_stages, Options...>()))::value > 0), Net,
                Options...>;
template <class Net, class... Options>
using resolve_net_t = typename resolve_net_for<Net, Options...>::type;

}  // namespace strata::detail
