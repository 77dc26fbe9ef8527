#pragma once
// The units a model is cut between (AutoStages, the search): its top-level items, each copy
// of a top-level Repeat<N, ...> one unit; and the shorter unit list a probe prices them from.
//
// A repeated block is probed once in the middle. Repeat<N, L...> with N > 4 enters a probe as
// four copies: the first (entered from what precedes it), two middle ones, and the last
// (followed by what follows). The planner's passes walk the layers in order, and what one
// copy hands the next is its layout, 3D turn and shape: a copy entered as the copy before it
// was entered repeats it exactly. So when the probe's second and third copies are entered
// alike (and cost alike), every middle copy of the model is the second, and a 48-block GPT is
// probed as 4 blocks, a tenth of the compile-time work and memory. Where they differ, the
// whole model is probed.
#include <array>
#include <cstddef>
#include <utility>

#include "strata/core/typelist.hpp"
#include "strata/layers/residual.hpp"
#include "strata/plan/model.hpp"
#include "strata/plan/partition.hpp"
#include "strata/plan/sharding.hpp"
#include "strata/strategy/strategy.hpp"

namespace strata::detail {

// ---- the units of a model -----------------------------------------------------------------
template <class T>
struct units_of_item {
  using type = type_list<T>;
};
template <int N, class... L>
struct units_of_item<Repeat<N, L...>> {
  using type = typename repeat_list<repeat_copies<N>, type_list<L...>>::type;
};

// How a model is cut: its units, and the part each slice of units becomes.
template <class Net>
struct auto_model {  // a bare layer, Residual or Repeat: one TaskGraph of the Default strategy
  static constexpr bool unannotated = !is_annotation_v<Net>;
  using items = type_list<Net>;
  using units = typename units_of_item<Net>::type;
  template <class... U>
  using part = Colocate<U...>;
};
template <class... I>
struct auto_model<Model<I...>> {
  static constexpr bool unannotated = (!is_annotation_v<I> && ...);
  using items = type_list<I...>;
  using units = concat_t<typename units_of_item<I>::type...>;
  template <class... U>
  using part = Colocate<U...>;
};
// Replicate<N, ...> or Split<N, ...> around the model: each stage keeps the strategy
template <template <int, class...> class Strategy, int N, class... I>
  requires is_strategy_v<Strategy<N, I...>>
struct auto_model<Strategy<N, I...>> {
  static constexpr bool unannotated = (!is_annotation_v<I> && ...);
  using items = type_list<I...>;
  using units = concat_t<typename units_of_item<I>::type...>;
  template <class... U>
  using part = Strategy<N, U...>;
};

// Units [B, B + sizeof J) as one part.
template <template <class...> class Part, class List, int B, std::size_t... J>
auto slice_part(std::index_sequence<J...>) -> Part<list_nth_t<static_cast<std::size_t>(B) + J, List>...>;
template <template <class...> class Part, class List, int B, int E>
using slice_t = decltype(slice_part<Part, List, B>(std::make_index_sequence<static_cast<std::size_t>(E - B)>{}));

template <class Units, template <class...> class Part>
struct whole_part;
template <class... U, template <class...> class Part>
struct whole_part<type_list<U...>, Part> {
  using type = Part<U...>;
};

// The first flat layer of each unit, and the total after the last.
template <class... U>
constexpr std::array<int, sizeof...(U) + 1> unit_firsts(type_list<U...>) {
  constexpr std::array<int, sizeof...(U) + 1> sizes{item_layers<U>::type::size..., 0};
  std::array<int, sizeof...(U) + 1> f{};
  for (std::size_t u = 0; u < sizeof...(U); ++u) f[u + 1] = f[u] + sizes[u];
  return f;
}

// ---- the probe's units: a long Repeat kept four times -------------------------------------
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

// Whether a probe's twin copies (units [second, second + period) and the next `period`) are
// entered alike and planned alike, layer by layer: layouts, 3D turn, shapes, local shares,
// collectives and recomputation regions. Entered alike, every later copy repeats them.
template <class Probe, std::size_t NP>
constexpr bool twin_layers_alike(const std::array<int, NP + 1>& first, int second, int period) {
  const strata::layer_plan* plans = Probe::layer_plans.data();
  const int* regions = Probe::recompute_region.data();
  const int a0 = first[static_cast<std::size_t>(second)], b0 = first[static_cast<std::size_t>(second + period)];
  for (int j = 0; j < b0 - a0; ++j) {
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
  return true;
}

// ... and cost alike, unit by unit (partition.hpp's unit_costs).
template <std::size_t NP>
constexpr bool twin_costs_alike(const unit_costs<NP>& m, int second, int period) {
  for (int u = second; u < second + period; ++u) {
    const auto v = static_cast<std::size_t>(u), w = static_cast<std::size_t>(u + period);
    if (!(m.cost[v] == m.cost[w] && m.state[v] == m.state[w] && m.act[v] == m.act[w] && m.ping[v] == m.ping[w] &&
          m.scratch[v] == m.scratch[w] && m.scratch_stats[v] == m.scratch_stats[w] &&
          m.recompute[v] == m.recompute[w] && m.recompute_stats[v] == m.recompute_stats[w] &&
          m.skip[v] == m.skip[w] && m.skip_levels[v] == m.skip_levels[w] && m.gathered[v] == m.gathered[w] &&
          m.entry[v] == m.entry[w] &&
          m.exit[v] == m.exit[w] && m.tail[v] == m.tail[w]))
      return false;
  }
  return true;
}

// The model's unit costs from the probe's: unit u costs what probe unit unit[u] does.
template <std::size_t NU, std::size_t NP>
constexpr unit_costs<NU> spread_costs(const unit_costs<NP>& s, const std::array<int, NU>& unit) {
  unit_costs<NU> d{};
  const int* of = unit.data();
  for (std::size_t u = 0; u < NU; ++u) {
    const auto p = static_cast<std::size_t>(of[u]);
    d.cost[u] = s.cost[p], d.state[u] = s.state[p], d.act[u] = s.act[p], d.ping[u] = s.ping[p];
    d.scratch[u] = s.scratch[p], d.scratch_stats[u] = s.scratch_stats[p];
    d.recompute[u] = s.recompute[p], d.recompute_stats[u] = s.recompute_stats[p];
    d.skip[u] = s.skip[p], d.skip_levels[u] = s.skip_levels[p], d.gathered[u] = s.gathered[p];
    d.entry[u] = s.entry[p], d.exit[u] = s.exit[p], d.tail[u] = s.tail[p];
  }
  return d;
}

}  // namespace strata::detail
