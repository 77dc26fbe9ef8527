#pragma once
// The cost model's step time for a plan as written (the search prices probe plans of a
// model it cuts itself, plan/search.hpp): each TaskGraph of P one unit of plan/cost.hpp's
// profile (read off P's lowering — its local shapes, buffers and the collectives inside
// each layer, whatever the strategy: Split's, or Context's all-gathers, all-to-alls and ring
// messages), cut where P's pipeline parts begin, run by P's degrees, micro-batches,
// schedule and ZeRO level over `data` replicas. The units are TaskGraphs because what the
// model sizes per unit is theirs: a recomputed region's kept input (regions stay inside a
// TaskGraph), ZeRO-3's staging slots (a TaskGraph's weights). A Replicate<N> or Context<N>
// part reduces its gradients over its N devices and the replicas together.
//
//   const cost::step_estimate e = cost::predict<P>(hw, world_size / P::devices_per_replica);
//
// The schedule must be one the model prices (cost::priced_schedule, not a V placement:
// 1F1B, GPipe, ZB-H1, interleaved 1F1B). Everything is constexpr: with a description's
// value it is a compile-time number; with one measured at run time (runtime/calibrate.hpp),
// a run-time one. The collectives inside a layer (tensor parallelism, context parallelism's
// messages) are priced as if nothing overlapped them.
#include <array>
#include <cstddef>

#include "strata/plan/cost.hpp"
#include "strata/plan/schedule_traits.hpp"

namespace strata {

namespace detail {
// The first flat layer of each TaskGraph of P, and the layer count after the last.
template <class P>
constexpr std::array<int, static_cast<std::size_t>(P::num_taskgraphs) + 1> predict_units() {
  std::array<int, static_cast<std::size_t>(P::num_taskgraphs) + 1> first{};
  for (std::size_t t = 0; t < static_cast<std::size_t>(P::num_taskgraphs); ++t) first[t] = P::taskgraphs[t].first_layer;
  first[static_cast<std::size_t>(P::num_taskgraphs)] = P::num_layers;
  return first;
}
// Where each of P's parts begins, in TaskGraphs (a part is a run of them), and the end.
template <class P>
constexpr std::array<int, static_cast<std::size_t>(P::num_parts) + 1> predict_cuts() {
  std::array<int, static_cast<std::size_t>(P::num_parts) + 1> cuts{};
  for (auto& c : cuts) c = P::num_taskgraphs;
  for (int t = P::num_taskgraphs - 1; t >= 0; --t) cuts[static_cast<std::size_t>(P::taskgraphs[static_cast<std::size_t>(t)].part)] = t;
  return cuts;
}
}  // namespace detail

namespace cost {

template <class P>
  requires priced_schedule<typename P::schedule_t> && (!sched::schedule_traits<typename P::schedule_t>::v_shape)
constexpr step_estimate predict(const hardware& hw, int data = 1) {
  constexpr std::size_t U = static_cast<std::size_t>(P::num_taskgraphs);
  constexpr std::size_t K = static_cast<std::size_t>(P::num_parts);
  const profile<U> pr = profile_of<P, U>(strata::detail::predict_units<P>(), hw);
  // a tensor-parallel part (Split) holds shards; any other part its own copy of the parameters
  // (Context<N, Split<T>>: each shard on its N context devices)
  constexpr bool sharded = P::taskgraphs[0].kind == strategy_kind::split;
  constexpr int reduce = P::context_tensor > 1 ? P::context : sharded ? 1 : P::part_devices;
  const parallel_config c{.tensor = P::part_devices,
                          .pipeline = P::stages,
                          .data = data > 0 ? data : 1,
                          .micro_batch = P::micro_batch,
                          .micro_batches = P::num_micro_batch,
                          .schedule = price_of<typename P::schedule_t>,
                          .zero = P::zero,
                          .part_reduce = reduce};
  return estimate<U, K>(pr, strata::detail::predict_cuts<P>(), c, hw);
}

}  // namespace cost
}  // namespace strata
