#pragma once
// The search's probes (plan/search.hpp): for one (tensor degree, sequence parallel,
// recomputation), each unit's time and memory on one device, read off the planner's passes
// over the model on one stage — what cost::profile_of and unit_costs_of read of a Plan.
//
// A long Repeat is probed as four copies (plan/units.hpp): where the second and third are
// planned and priced alike, every middle copy is priced as the second; else the whole model.
#include <array>
#include <cstddef>
#include <type_traits>

#include "strata/plan/auto_stages.hpp"
#include "strata/plan/cost.hpp"
#include "strata/plan/lower/parts.hpp"
#include "strata/plan/passes/shard.hpp"
#include "strata/plan/recompute.hpp"
#include "strata/plan/units.hpp"

namespace strata::detail {

// A probe: the passes the cost model reads (structure to sharding, no schedule, no Plan), the
// calls' local dimensions and memory needs (the lowering's first step only), and the
// recomputation regions of GradientCheckpoint<automatic> when RC — computed from the same
// sharded layers, since recomputation changes no layout.
template <class Net, class List>
struct probe_passes_of;
template <class Net, class... O>
struct probe_passes_of<Net, type_list<O...>> {
  using type = shard_pass<shapes_pass<placement_pass<structure_pass<Net, O...>>>>;
};
template <class P>
struct probe_calls {
  struct table {
    std::array<lower::layer_call, static_cast<std::size_t>(P::num_layers)> calls{};
  };
  static constexpr table tables = [] {
    table t{};
    lower::detail::describe_calls<P>(t);
    return t;
  }();
};
template <class P, bool RC>
struct probe_view {
  using element_type = typename P::element_type;
  using lowering = probe_calls<P>;
  static constexpr int num_layers = P::num_layers, micro_batch = P::micro_batch, replica_batch = P::replica_batch;
  static constexpr int part_devices = P::part_devices, context = P::context, context_tensor = P::context_tensor;
  static constexpr long long element_bytes = P::element_bytes, master_bytes = P::master_bytes,
                             stat_bytes = P::stat_bytes;
  static constexpr bool mixed_precision = P::mixed_precision;
  static constexpr const auto& layer_plans = P::layer_plans;
  static constexpr auto recompute_region =
      plan_recompute(P::layer_plans, RC ? checkpoint_mode::automatic : P::recompute,
                     items_info<typename P::items>::user_marks, items_info<typename P::items>::block_marks)
          .region;
};

// Whether the probe's twin copies are planned alike and price alike, unit by unit (units.hpp)
template <class Probe, std::size_t NP>
constexpr bool twins_alike(const cost::profile<NP>& pr, const std::array<int, NP + 1>& first, int second, int period) {
  if (!twin_layers_alike<Probe, NP>(first, second, period) || !twin_costs_alike(pr.memory, second, period)) return false;
  const cost::unit_time* t = pr.units.data();
  for (int u = second; u < second + period; ++u) {
    const cost::unit_time &x = t[u], &y = t[u + period];
    if (!(x.forward_s == y.forward_s && x.backward_s == y.backward_s && x.recompute_s == y.recompute_s &&
          x.tensor_comm_s == y.tensor_comm_s && x.forward_comm_s == y.forward_comm_s && x.model_flops == y.model_flops &&
          x.local_params == y.local_params &&
          x.weight_s == y.weight_s && x.keep_bytes == y.keep_bytes && x.accumulate_s == y.accumulate_s))
      return false;
  }
  return true;
}

// The model's profile from the probe's: unit u priced as probe unit unit[u].
template <std::size_t NU, std::size_t NP>
constexpr cost::profile<NU> spread_profile(const cost::profile<NP>& pr, const std::array<int, NU>& unit) {
  cost::profile<NU> r{};
  r.num_units = static_cast<int>(NU);
  r.micro_batch = pr.micro_batch, r.tensor = pr.tensor, r.mixed = pr.mixed;
  r.element_bytes = pr.element_bytes, r.master_bytes = pr.master_bytes, r.peak_flops = pr.peak_flops;
  r.memory = spread_costs<NU, NP>(pr.memory, unit);
  const int* of = unit.data();
  for (std::size_t u = 0; u < NU; ++u) r.units[u] = pr.units[static_cast<std::size_t>(of[u])];
  return r;
}

template <class Model, int T, bool SP, bool RC, class Hw, class... O>
struct search_probe {
  using model = auto_model<Model>;
  using units = typename model::units;
  static constexpr int num_units = units::size;
  static constexpr std::size_t NU = static_cast<std::size_t>(num_units);
  template <class... U>
  using part = std::conditional_t<T == 1, Replicate<1, U...>, Split<T, U...>>;
  using options = concat_t<type_list<O...>, type_list<MicroBatch<1>>,
                           std::conditional_t<SP, type_list<SequenceParallel>, type_list<>>>;
  template <class Units>
  using probe_on = probe_view<typename probe_passes_of<typename whole_part<Units, part>::type, options>::type, RC>;
  static constexpr auto first = unit_firsts(units{});

  // the shortened probe, its profile on Hw, and whether its twins vouch for it
  using short_units = probe_units_of<typename model::items>;
  static_assert(short_units::model_units == NU);
  static constexpr std::size_t NP = short_units::units::size;
  using short_probe = probe_on<typename short_units::units>;
  static constexpr auto short_first = unit_firsts(typename short_units::units{});
  static constexpr cost::profile<NP> short_profile = [] {
    if constexpr (short_units::shortened == 0) return cost::profile<NP>{};
    else return cost::profile_of<short_probe, NP>(short_first, Hw::value);
  }();
  static constexpr bool shortened = [] {
    if constexpr (short_units::shortened == 0) {
      return false;
    } else {
      for (const auto& tw : short_units::map.twins)
        if (!twins_alike<short_probe, NP>(short_profile, short_first, tw.second, tw.period)) return false;
      return true;
    }
  }();
  // the model's profile on `hw`
  static constexpr cost::profile<NU> profile_on(const hardware& hw) {
    if constexpr (shortened)
      return spread_profile<NU, NP>(cost::profile_of<short_probe, NP>(short_first, hw), short_units::map.unit);
    else
      return cost::profile_of<probe_on<units>, NU>(first, hw);
  }
  static constexpr cost::profile<NU> profile = [] {
    if constexpr (shortened) return spread_profile<NU, NP>(short_profile, short_units::map.unit);
    else return profile_on(Hw::value);
  }();
  // the FLOP-balanced cut into P stages (memory is checked per candidate, at its batch)
  template <int P>
  static constexpr std::array<int, static_cast<std::size_t>(P) + 1> cut =
      balanced_cut<NU, static_cast<std::size_t>(P)>(profile.memory).cuts;
};

}  // namespace strata::detail
