#pragma once
// Compile-time search for a plan: given an unannotated model, a device count, a
// per-device memory budget, a global batch and a hardware description, try every
//   tensor degree t (TensorDegrees<...> dividing the devices, at most a node),
//   sequence parallelism (t > 1) on or off, recomputation of every block on or off,
//   pipeline degree p (a power of two dividing devices / t, at most the units),
//   data degree d = devices / (t · p), micro-batch size b in {1, 2, 4, 8} dividing the
//   global batch per replica (M = batch / (d · b) micro-batches), ZeRO 0-3 (d > 1; at 3
//   every unit its own TaskGraph), and the schedule (detail::searched_schedules): 1F1B,
//   ZB-H1, or interleaved 1F1B with two chunks per stage, where the plan's rules allow it
//   (ZB-H1: no recomputation, ZeRO 0 or 1; interleaved: M a multiple of p), with p > 1
//   for all but the first (one stage runs them all alike) and ZeRO-3 with one chunk per
//   stage only,
// and rank them by the cost model's step time (plan/cost.hpp); those whose fullest stage
// (the partition estimate, plan/partition.hpp) exceeds the budget are dropped. Each (t,
// sequence parallel) is one probe (the model on one stage, Split<t>: the passes up to the
// sharding, priced with and without recomputation; plan/search_probe.hpp, which probes a long
// Repeat as four copies); its stages for each p are AutoStages' balanced cut. `plan` is the
// best one as an ordinary Plan type; `ranked` the best `Keep` candidates, printable with
// print_ranked.
//
// Not searched (yet): more than two interleaved chunks, ZeRO-3 with interleaving, offload,
// 2D/2.5D/3D tensor modes.
#include <array>
#include <cstddef>
#include <cstdio>
#include <string_view>
#include <type_traits>
#include <utility>

#include "strata/plan/auto_stages.hpp"
#include "strata/plan/cost.hpp"
#include "strata/plan/hardware.hpp"
#include "strata/plan/partition.hpp"
#include "strata/plan/schedule.hpp"
#include "strata/plan/search_probe.hpp"

namespace strata {

template <int... T>
struct TensorDegrees {};

namespace detail {

inline constexpr std::array<int, 4> search_micro_batches{1, 2, 4, 8};
inline constexpr int search_max_log2_pipeline = 6;  // p up to 64

// The schedules the search tries, in this order: tags the cost model prices, read off
// their traits. The first is the plan's default. GPipe is left out (the model prices it
// as 1F1B holding more micro-batches), ZB-V too (not priced yet).
template <class... S>
struct schedule_set {
  static constexpr std::size_t size = sizeof...(S);
  static constexpr std::array<cost::schedule_price, size> price{cost::price_of<S>...};
  static constexpr std::array<std::string_view, size> label{sched::schedule_traits<S>::label...};
  static constexpr std::array<diagnosis (*)(int, int, int), size> check{&sched::schedule_traits<S>::check...};
  template <int I>
  using nth = nth_t<static_cast<std::size_t>(I), S...>;
  // ZeRO-3 with one chunk per stage only: its per-unit TaskGraphs in interleaved parts
  // are not run by any test; a split backward by [zero-bubble]
  static constexpr bool tries_zero(std::size_t i, int z, bool recompute) {
    return (z < 3 || price[i].chunks == 1) &&
           (!price[i].split_backward || sched::split_backward_allows(recompute ? 1 : 0, z, z >= 3));
  }
  // at P stages and M micro-batches: the schedule's own rules, and one stage for the first only
  static constexpr bool tries(std::size_t i, int P, int M) {
    return (P > 1 || i == 0) && check[i](price[i].chunks * P, P, M).ok();
  }
  // ZeRO levels tried per micro-batch size at most (every schedule at every level it may take)
  static constexpr int zero_levels = [] {
    int n = 0;
    for (std::size_t i = 0; i < size; ++i)
      for (int z = 0; z <= 3; ++z) n += tries_zero(i, z, false);
    return n;
  }();
  // the distinct chunk counts, in order: one cut of the probe each
  struct counts {
    std::array<int, size> values{};
    int n = 0;
  };
  static constexpr counts chunk_counts = [] {
    counts c;
    for (const cost::schedule_price& x : price) {
      bool seen = false;
      for (int k = 0; k < c.n; ++k) seen = seen || c.values[static_cast<std::size_t>(k)] == x.chunks;
      if (!seen) c.values[static_cast<std::size_t>(c.n++)] = x.chunks;
    }
    return c;
  }();
};
using searched_schedules = schedule_set<PreferBackward, ZeroBubbleH1, Interleaved<2>>;

// A stage of the chosen plan: the units on one strategy, or under ZeRO-3 each unit a
// TaskGraph of its own on that strategy.
template <template <class...> class Part, bool UnitGraphs>
struct search_part {
  template <class... U>
  using type = Part<U...>;
};
template <template <class...> class Part>
struct search_part<Part, true> {
  template <class... U>
  using type = Colocate<Part<U>...>;
};

}  // namespace detail

// One configuration the search tried.
struct candidate {
  int tensor = 0, pipeline = 0, data = 0, micro_batch = 0, micro_batches = 0, zero = 0;
  int schedule = 0;  // detail::searched_schedules' index
  int chunks = 1;    // its chunks per stage: 2 runs interleaved 1F1B over 2·pipeline parts
  bool sequence_parallel = false, recompute = false, zero_bubble = false, fits = false;  // zero_bubble: split backward
  cost::step_estimate estimate{};
};

template <class Model, int Devices, long long BudgetMiB, int GlobalBatch, class Hw, class Degrees, class... Options>
struct Search;

template <class Model, int Devices, long long BudgetMiB, int GlobalBatch, class Hw, int... T, class... Options>
struct Search<Model, Devices, BudgetMiB, GlobalBatch, Hw, TensorDegrees<T...>, Options...> {
  static constexpr long long budget = BudgetMiB * 1024 * 1024;
  static constexpr int keep = 8;
  using schedules = detail::searched_schedules;
  // per (t, SP, RC, p): micro-batch sizes × the ZeRO levels each schedule may take
  static constexpr int per_pipeline =
      static_cast<int>(detail::search_micro_batches.size()) * schedules::zero_levels;
  static constexpr int max_candidates =
      static_cast<int>(sizeof...(T)) * 4 * (detail::search_max_log2_pipeline + 1) * per_pipeline;

  template <int t, bool SP, bool RC>
  using probe = detail::search_probe<Model, t, SP, RC, Hw, Options...>;

  template <int Cap>
  struct table_of {
    static constexpr int capacity = Cap;
    std::array<candidate, static_cast<std::size_t>(Cap)> rows{};
    int size = 0, tried = 0, fitting = 0;
  };
  using table = table_of<max_candidates>;

  // every (micro-batch, ZeRO, schedule) of one (t, SP, RC, P) whose schedules run V chunks per
  // stage: V·P parts of the probe's cut
  template <int t, bool SP, bool RC, int P, int V, class Table>
  static constexpr void add_schedules(Table& tb) {
    using pr = probe<t, SP, RC>;
    if constexpr (V * P <= pr::num_units && (Devices / t) % P == 0) {
      const int d = Devices / (t * P);
      for (int b : detail::search_micro_batches) {
        if (GlobalBatch % (d * b) != 0) continue;
        const int m = GlobalBatch / (d * b);
        for (int z = 0; z <= 3; ++z) {
          if (z > 0 && d == 1) continue;  // ZeRO divides over the data group
          for (std::size_t i = 0; i < schedules::size; ++i) {
            const cost::schedule_price& sp = schedules::price[i];
            if (sp.chunks != V || !schedules::tries_zero(i, z, RC) || !schedules::tries(i, P, m)) continue;
            candidate c;
            c.tensor = t, c.pipeline = P, c.data = d, c.micro_batch = b, c.micro_batches = m;
            c.zero = z, c.sequence_parallel = SP, c.recompute = RC;
            c.schedule = static_cast<int>(i), c.chunks = V, c.zero_bubble = sp.split_backward;
            const cost::parallel_config pc{.tensor = t, .pipeline = P, .data = d, .micro_batch = b,
                                           .micro_batches = m, .schedule = sp, .zero = z};
            c.estimate = cost::estimate<pr::NU, static_cast<std::size_t>(V * P)>(pr::profile, pr::template cut<V * P>,
                                                                                  pc, Hw::value);
            c.fits = c.estimate.memory_bytes <= budget;
            ++tb.tried;
            tb.fitting += c.fits;
            if (tb.size < Table::capacity) tb.rows[static_cast<std::size_t>(tb.size++)] = c;
          }
        }
      }
    }
  }
  template <int t, bool SP, bool RC, int P, class Table, std::size_t... K>
  static constexpr void add_pipeline(Table& tb, std::index_sequence<K...>) {
    (add_schedules<t, SP, RC, P, schedules::chunk_counts.values[K]>(tb), ...);
  }
  // one constant evaluation per (probe, pipeline depth): compilers bound the work of each
  // (nvcc's complexity limit has no flag)
  template <int t, bool SP, bool RC, int P>
  static constexpr table_of<per_pipeline> pipeline_table_v = [] {
    table_of<per_pipeline> tb;
    add_pipeline<t, SP, RC, P>(tb, std::make_index_sequence<static_cast<std::size_t>(schedules::chunk_counts.n)>{});
    return tb;
  }();
  template <int t, bool SP, bool RC, std::size_t... L>
  static constexpr table probe_table(std::index_sequence<L...>) {
    table tb;
    if constexpr (!(SP && t == 1)) (merge(tb, pipeline_table_v<t, SP, RC, (1 << L)>), ...);  // SP: nothing to split at t = 1
    return tb;
  }
  template <int t, bool SP, bool RC>
  static constexpr table probe_table_v = probe_table<t, SP, RC>(
      std::make_index_sequence<static_cast<std::size_t>(detail::search_max_log2_pipeline + 1)>{});
  template <class From>
  static constexpr void merge(table& into, const From& from) {
    for (int i = 0; i < from.size && into.size < max_candidates; ++i)
      into.rows[static_cast<std::size_t>(into.size++)] = from.rows[static_cast<std::size_t>(i)];
    into.tried += from.tried;
    into.fitting += from.fitting;
  }
  template <int t>
  static constexpr void add_tensor(table& tb) {
    if constexpr (Devices % t == 0 && t <= Hw::value.devices_per_node) {
      merge(tb, probe_table_v<t, false, false>);
      merge(tb, probe_table_v<t, false, true>);
      merge(tb, probe_table_v<t, true, false>);
      merge(tb, probe_table_v<t, true, true>);
    }
  }

  static constexpr table all = [] {
    table tb;
    (add_tensor<T>(tb), ...);
    return tb;
  }();

  // The fitting candidates, fastest first (ties: fewer devices per replica, then fewer bytes).
  static constexpr auto ranked = [] {
    std::array<candidate, static_cast<std::size_t>(keep)> best{};
    int n = 0;
    auto better = [](const candidate& a, const candidate& b) {
      if (a.estimate.step_s != b.estimate.step_s) return a.estimate.step_s < b.estimate.step_s;
      if (a.tensor * a.pipeline != b.tensor * b.pipeline) return a.tensor * a.pipeline < b.tensor * b.pipeline;
      return a.estimate.memory_bytes < b.estimate.memory_bytes;
    };
    for (int i = 0; i < all.size; ++i) {
      const candidate& c = all.rows[static_cast<std::size_t>(i)];
      if (!c.fits) continue;
      int at = n < keep ? n : keep;
      while (at > 0 && better(c, best[static_cast<std::size_t>(at - 1)])) --at;
      if (at >= keep) continue;
      for (int j = (n < keep ? n : keep - 1); j > at; --j) best[static_cast<std::size_t>(j)] = best[static_cast<std::size_t>(j - 1)];
      best[static_cast<std::size_t>(at)] = c;
      n += n < keep;
    }
    return best;
  }();
  static constexpr int num_ranked = [] {
    int n = 0;
    for (int i = 0; i < all.size; ++i) n += all.rows[static_cast<std::size_t>(i)].fits;
    return n < keep ? n : keep;
  }();
  static constexpr bool found = num_ranked > 0;
  static_assert(rule::search_fits<found, Devices, BudgetMiB>::value);
  static constexpr candidate best = ranked[0];

  // A configuration priced as the search prices it, on another hardware description (one
  // measured at run time: runtime/calibrate.hpp): its probe's profile on `hw`, the same cut
  // (balanced by the probe's FLOPs, which do not depend on the hardware). A candidate the
  // search did not try gives an empty estimate.
  static constexpr cost::step_estimate reprice(const candidate& c, const hardware& hw) {
    cost::step_estimate e{};
    ((c.tensor == T ? (void)(e = reprice_tensor<T>(c, hw)) : void()), ...);
    return e;
  }

 private:
  template <int t>
  static constexpr cost::step_estimate reprice_tensor(const candidate& c, const hardware& hw) {
    if constexpr (Devices % t == 0 && t <= Hw::value.devices_per_node) {
      if (c.sequence_parallel) return c.recompute ? reprice_probe<t, true, true>(c, hw) : reprice_probe<t, true, false>(c, hw);
      return c.recompute ? reprice_probe<t, false, true>(c, hw) : reprice_probe<t, false, false>(c, hw);
    } else {
      return {};
    }
  }
  template <int t, bool SP, bool RC>
  static constexpr cost::step_estimate reprice_probe(const candidate& c, const hardware& hw) {
    if constexpr (SP && t == 1) {
      return {};
    } else {
      using pr = probe<t, SP, RC>;
      const auto profile = pr::profile_on(hw);
      const cost::parallel_config pc{.tensor = t, .pipeline = c.pipeline, .data = c.data, .micro_batch = c.micro_batch,
                                     .micro_batches = c.micro_batches,
                                     .schedule = schedules::price[static_cast<std::size_t>(c.schedule)], .zero = c.zero};
      cost::step_estimate e{};
      reprice_cut<pr>(c.chunks * c.pipeline, profile, pc, hw, e,
                      std::make_index_sequence<static_cast<std::size_t>(detail::search_max_log2_pipeline + 2)>{});
      return e;
    }
  }
  // the parts (V·P, a power of two) as a compile-time count
  template <class Pr, class Profile, std::size_t... L>
  static constexpr void reprice_cut(int parts, const Profile& profile, const cost::parallel_config& pc,
                                    const hardware& hw, cost::step_estimate& e, std::index_sequence<L...>) {
    (
        [&] {
          constexpr int K = 1 << L;
          if constexpr (K <= Pr::num_units)
            if (parts == K)
              e = cost::estimate<Pr::NU, static_cast<std::size_t>(K)>(profile, Pr::template cut<K>, pc, hw);
        }(),
        ...);
  }

  // ---- a candidate's plan, as a type ----------------------------------------------------
  // all.rows[I] (any configuration tried, fitting or not), or I = -1 the best
  template <int I>
  struct plan_builder {
    static constexpr bool ok = I >= 0 || found;
    static constexpr candidate c = I >= 0 ? all.rows[static_cast<std::size_t>(I)] : best;
    static constexpr int t = ok ? c.tensor : 1, chunks = ok ? c.chunks : 1, parts = (ok ? c.pipeline : 1) * chunks;
    static constexpr bool sp = ok && c.sequence_parallel, rc = ok && c.recompute;
    using schedule = typename schedules::template nth<ok ? c.schedule : 0>;  // the default needs no option
    using chosen_probe = probe<t, sp, rc>;
    using units = typename chosen_probe::units;
    static constexpr auto cuts = chosen_probe::template cut<parts>;
    // ZeRO-3 gathers and frees one TaskGraph at a time: each unit becomes one (FSDP's
    // per-block wrapping), so a stage is a Colocate group of them
    template <class... U>
    using part = typename detail::search_part<chosen_probe::template part, ok && c.zero >= 3>::template type<U...>;
    template <std::size_t... S>
    static auto make(std::index_sequence<S...>) -> Pipeline<detail::slice_t<part, units, cuts[S], cuts[S + 1]>...>;
    using net = decltype(make(std::make_index_sequence<static_cast<std::size_t>(parts)>{}));
    using options = detail::concat_t<
        type_list<Options...>,
        type_list<MicroBatch<ok ? c.micro_batch : 1>, NumMicroBatch<ok ? c.micro_batches : 1>, Zero<ok ? c.zero : 0>,
                  World<Devices>>,
        std::conditional_t<sp, type_list<SequenceParallel>, type_list<>>,
        std::conditional_t<rc, type_list<GradientCheckpoint<checkpoint_mode::automatic>>, type_list<>>,
        std::conditional_t<std::is_same_v<schedule, PreferBackward>, type_list<>, type_list<Schedule<schedule>>>>;
    using type = typename detail::plan_of<net, options>::type;
  };

 public:
  using plan = typename plan_builder<-1>::type;
  // The plan of any configuration tried (all.rows[I]): a runner-up, or one to compare with.
  template <int I>
  using plan_of_candidate = typename plan_builder<I>::type;

  // The ranking, one line per candidate.
  static void print_ranked(std::FILE* out = stdout) {
    std::fprintf(out, "strata search: %d devices, %lld MiB each, batch %d on %s: %d configurations, %d fit\n", Devices,
                 BudgetMiB, GlobalBatch, Hw::value.name.data(), all.tried, all.fitting);
    std::fprintf(out, "  # |  TP  PP  DP | mb    M | SP RC ZeRO sched |   step ms |  MFU  | MiB/dev | compute tp-comm pp-comm bubble dp-comm\n");
    for (int i = 0; i < num_ranked; ++i) {
      const candidate& c = ranked[static_cast<std::size_t>(i)];
      const auto& e = c.estimate;
      auto pct = [&](double x) { return 100 * x / e.step_s; };
      const std::string_view label = schedules::label[static_cast<std::size_t>(c.schedule)];
      std::fprintf(out, " %2d | %3d %3d %3d | %2d %4d | %2s %2s  %d   %-5.*s | %9.2f | %4.1f%% | %7.0f | %5.1f%% %5.1f%% %5.1f%% %5.1f%% %5.1f%%\n",
                   i + 1, c.tensor, c.pipeline, c.data, c.micro_batch, c.micro_batches,
                   c.sequence_parallel ? "y" : "n", c.recompute ? "y" : "n", c.zero,
                   static_cast<int>(label.size()), label.data(),
                   1e3 * e.step_s, 100 * e.mfu,
                   static_cast<double>(e.memory_bytes) / (1LL << 20), pct(e.compute_s), pct(e.tensor_comm_s),
                   pct(e.pipeline_comm_s), pct(e.bubble_s), pct(e.data_comm_s));
    }
  }
};

}  // namespace strata
