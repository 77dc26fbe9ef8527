#pragma once
// The cost model's step time for a plan as written (the search prices probe plans of a
// model it cuts itself, plan/search.hpp): every flat layer of P one unit of its own
// profile (plan/cost.hpp's profile_of, read off P's lowering — its local shapes, buffers
// and the collectives inside each layer, whatever the strategy: Split, Replicate,
// Context's all-gathers, all-to-alls or ring messages), cut where P's pipeline parts
// begin, run by P's degrees, micro-batches, schedule and ZeRO level over `data` replicas.
//
//   const cost::step_estimate e = cost::predict<P>(hw, world_size / P::devices_per_replica);
//
// The schedule must be one the model prices (cost::priced_schedule: 1F1B, GPipe, ZB-H1,
// interleaved 1F1B). Everything is constexpr: with a hardware description's value it is a
// compile-time number; with one measured at run time (runtime/calibrate.hpp), a run-time one.
#include <array>
#include <cstddef>

#include "strata/plan/cost.hpp"

namespace strata::cost {

namespace detail {
// Where each of P's parts begins, in flat layers, and the end.
template <class P>
constexpr std::array<int, static_cast<std::size_t>(P::num_parts) + 1> part_cuts() {
  std::array<int, static_cast<std::size_t>(P::num_parts) + 1> cuts{};
  for (std::size_t k = 0; k < cuts.size(); ++k) cuts[k] = P::num_layers;
  for (const auto& tg : P::taskgraphs) {
    const auto k = static_cast<std::size_t>(tg.part);
    cuts[k] = tg.first_layer < cuts[k] ? tg.first_layer : cuts[k];
  }
  return cuts;
}
template <std::size_t L>
constexpr std::array<int, L + 1> every_layer() {
  std::array<int, L + 1> first{};
  for (std::size_t i = 0; i <= L; ++i) first[i] = static_cast<int>(i);
  return first;
}
}  // namespace detail

template <class P>
  requires priced_schedule<typename P::schedule_t>
constexpr step_estimate predict(const hardware& hw, int data = 1) {
  constexpr std::size_t L = static_cast<std::size_t>(P::num_layers);
  constexpr std::size_t K = static_cast<std::size_t>(P::num_parts);
  const profile<L> pr = profile_of<P, L>(detail::every_layer<L>(), hw);
  const parallel_config c{.tensor = P::part_devices,
                          .pipeline = P::stages,
                          .data = data > 0 ? data : 1,
                          .micro_batch = P::micro_batch,
                          .micro_batches = P::num_micro_batch,
                          .schedule = price_of<typename P::schedule_t>,
                          .zero = P::zero};
  return estimate<L, K>(pr, detail::part_cuts<P>(), c, hw);
}

}  // namespace strata::cost
