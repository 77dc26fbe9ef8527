#pragma once
// The search's probes (plan/search.hpp): for one (tensor degree, sequence parallel,
// recomputation), each unit's time and memory on one device, read off the planner's passes
// over the model on one stage — what cost::profile_of and unit_costs_of read of a Plan.
//
// A repeated block is probed once in the middle. Repeat<N, L...> with N > 4 enters the probe
// as four copies: the first (entered from what precedes it), two middle ones, and the last
// (followed by what follows). The passes the cost model reads walk the layers in order, and
// what one copy hands the next is its layout, 3D turn and shape: a copy entered as the copy
// before it was entered repeats it exactly. So when the probe's second and third copies are
// entered alike (and price alike), every middle copy of the model is the second, and a
// 48-block GPT is probed as 4 blocks (a tenth of the compile-time work and memory). Where
// they differ, the whole model is probed.
#include <array>
#include <cstddef>
#include <type_traits>

#include "strata/plan/auto_stages.hpp"
#include "strata/plan/cost.hpp"
#include "strata/plan/lower/parts.hpp"
#include "strata/plan/passes/shard.hpp"
#include "strata/plan/recompute.hpp"

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

// ---- the probe's units: repeated blocks kept four times -----------------------------------
template <class Net>
struct model_items {
  using type = type_list<Net>;
};
template <class... I>
struct model_items<Model<I...>> {
  using type = type_list<I...>;
};
template <template <int, class...> class Strategy, int N, class... I>
  requires is_strategy_v<Strategy<N, I...>>
struct model_items<Strategy<N, I...>> {
  using type = type_list<I...>;
};

inline constexpr int probe_kept_copies = 4;
template <class I>
struct probe_item {
  using units = typename units_of_item<I>::type;
  static constexpr int copies = 1, kept = 1, period = static_cast<int>(units::size);
};
template <int N, class... L>
  requires(repeat_copies<N> > probe_kept_copies)
struct probe_item<Repeat<N, L...>> {
  using units = typename repeat_list<probe_kept_copies, type_list<L...>>::type;
  static constexpr int copies = repeat_copies<N>, kept = probe_kept_copies, period = static_cast<int>(sizeof...(L));
};

template <class Items>
struct probe_units_of;
template <class... I>
struct probe_units_of<type_list<I...>> {
  using units = concat_t<typename probe_item<I>::units...>;  // the probe's
  static constexpr std::size_t model_units = (0 + ... + static_cast<std::size_t>(probe_item<I>::copies * probe_item<I>::period));
  static constexpr int shortened = (0 + ... + (probe_item<I>::kept < probe_item<I>::copies ? 1 : 0));
  // A Repeat probed as four copies: its second copy's first probe unit and its period (the
  // third copy starts `period` units later).
  struct twin {
    int second = 0, period = 0;
  };
  struct layout {
    std::array<int, model_units> unit{};  // the probe unit each of the model's units is priced as
    std::array<twin, static_cast<std::size_t>(shortened > 0 ? shortened : 1)> twins{};
  };
  static constexpr layout map = [] {
    layout m{};
    constexpr std::array<int, sizeof...(I)> copies{probe_item<I>::copies...}, kept{probe_item<I>::kept...},
        period{probe_item<I>::period...};
    int model = 0, probe = 0, twins = 0;
    for (std::size_t i = 0; i < sizeof...(I); ++i) {
      const int c = copies[i], k = kept[i], p = period[i];
      if (k < c) m.twins[static_cast<std::size_t>(twins++)] = twin{probe + p, p};
      for (int copy = 0; copy < c; ++copy) {
        // the first copies as they are, the middle ones as the second, the last as the last
        const int as = k == c ? copy : copy == c - 1 ? k - 1 : copy < 2 ? copy : 1;
        for (int j = 0; j < p; ++j) m.unit[static_cast<std::size_t>(model++)] = probe + as * p + j;
      }
      probe += k * p;
    }
    return m;
  }();
};

// Whether the probe's twin copies are entered alike and price alike, layer by layer and unit
// by unit: then every middle copy of the model is priced as the second.
template <class Probe, std::size_t NP>
constexpr bool twins_alike(const cost::profile<NP>& pr, const std::array<int, NP + 1>& first, int second, int period) {
  const strata::layer_plan* plans = Probe::layer_plans.data();
  const int* regions = Probe::recompute_region.data();
  const int a0 = first[static_cast<std::size_t>(second)], b0 = first[static_cast<std::size_t>(second + period)];
  const int n = b0 - a0;
  for (int j = 0; j < n; ++j) {
    const strata::layer_plan &a = plans[a0 + j], &b = plans[b0 + j];
    bool same = a.arrives == b.arrives && a.in_layout == b.in_layout && a.out_layout == b.out_layout &&
                a.turned == b.turned && a.in == b.in && a.out == b.out && a.sig == b.sig &&
                a.local_param_elems == b.local_param_elems && a.local_flops_per_sample == b.local_flops_per_sample &&
                a.num_comms == b.num_comms && (regions[a0 + j] >= 0) == (regions[b0 + j] >= 0) &&
                (regions[a0 + j] != regions[a0 + j - 1]) == (regions[b0 + j] != regions[b0 + j - 1]);
    const comm_desc *ca = a.comms.data(), *cb = b.comms.data();
    for (int k = 0; same && k < a.num_comms; ++k)
      same = ca[k].kind == cb[k].kind && ca[k].group == cb[k].group && ca[k].when == cb[k].when &&
             ca[k].elems == cb[k].elems && ca[k].calls == cb[k].calls && ca[k].stats == cb[k].stats;
    if (!same) return false;
  }
  const cost::unit_time* t = pr.units.data();
  const auto& m = pr.memory;
  for (int u = second; u < second + period; ++u) {
    const cost::unit_time &x = t[u], &y = t[u + period];
    const auto v = static_cast<std::size_t>(u), w = static_cast<std::size_t>(u + period);
    if (!(x.forward_s == y.forward_s && x.backward_s == y.backward_s && x.recompute_s == y.recompute_s &&
          x.tensor_comm_s == y.tensor_comm_s && x.model_flops == y.model_flops && x.local_params == y.local_params &&
          x.weight_s == y.weight_s && x.keep_bytes == y.keep_bytes && x.accumulate_s == y.accumulate_s))
      return false;
    if (!(m.cost[v] == m.cost[w] && m.state[v] == m.state[w] && m.act[v] == m.act[w] && m.ping[v] == m.ping[w] &&
          m.scratch[v] == m.scratch[w] && m.scratch_stats[v] == m.scratch_stats[w] &&
          m.recompute[v] == m.recompute[w] && m.recompute_stats[v] == m.recompute_stats[w] &&
          m.entry[v] == m.entry[w] && m.exit[v] == m.exit[w]))
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
  const auto &s = pr.memory;
  auto& d = r.memory;
  const int* of = unit.data();
  for (std::size_t u = 0; u < NU; ++u) {
    const auto p = static_cast<std::size_t>(of[u]);
    r.units[u] = pr.units[p];
    d.cost[u] = s.cost[p], d.state[u] = s.state[p], d.act[u] = s.act[p], d.ping[u] = s.ping[p];
    d.scratch[u] = s.scratch[p], d.scratch_stats[u] = s.scratch_stats[p];
    d.recompute[u] = s.recompute[p], d.recompute_stats[u] = s.recompute_stats[p];
    d.entry[u] = s.entry[p], d.exit[u] = s.exit[p];
  }
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

  // the shortened probe, and whether its twins vouch for it
  using short_units = probe_units_of<typename model_items<Model>::type>;
  static_assert(short_units::model_units == NU);
  static constexpr std::size_t NP = short_units::units::size;
  static constexpr auto short_first = unit_firsts(typename short_units::units{});
  static constexpr bool shortened = [] {
    if constexpr (short_units::shortened == 0) {
      return false;
    } else {
      const auto pr = cost::profile_of<probe_on<typename short_units::units>, NP>(short_first, Hw::value);
      for (const auto& tw : short_units::map.twins)
        if (!twins_alike<probe_on<typename short_units::units>, NP>(pr, short_first, tw.second, tw.period))
          return false;
      return true;
    }
  }();
  // the model's profile on `hw`
  static constexpr cost::profile<NU> profile_on(const hardware& hw) {
    if constexpr (shortened)
      return spread_profile<NU, NP>(cost::profile_of<probe_on<typename short_units::units>, NP>(short_first, hw),
                                    short_units::map.unit);
    else
      return cost::profile_of<probe_on<units>, NU>(first, hw);
  }
  static constexpr cost::profile<NU> profile = profile_on(Hw::value);
  // the FLOP-balanced cut into P stages (memory is checked per candidate, at its batch)
  template <int P>
  static constexpr std::array<int, static_cast<std::size_t>(P) + 1> cut =
      balanced_cut<NU, static_cast<std::size_t>(P)>(profile.memory).cuts;
};

}  // namespace strata::detail
