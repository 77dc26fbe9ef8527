#pragma once
// The memory analysis of parameters, gradients and optimizer state: what a device of a
// stage allocates for them (exec/store.hpp), per ZeRO level, offload and precision.
// Plan::parameter_bytes, gradient_bytes, adam_state_bytes, ... call these. `dp` is the
// data-parallel degree (0: unknown, counted as 1).
//
//                 masters               gradients                    optimizer state
//   Zero<0>       whole                 whole                        whole
//   Zero<1>       whole                 whole                        this device's chunks
//   Zero<2>       whole                 chunks + 1 or 2 TG slots     chunks
//   Zero<3>       chunks (+ 2 slots)    chunks + 1 or 2 TG slots     chunks
//
// "chunks": this device's chunk of every gradient bucket plus the bucket's tail
// (exec/zero.hpp), about 1/R of the stage's parameters for a reduction over R devices.
#include <cstddef>

#include "strata/plan/lower.hpp"

namespace strata::detail {

// The largest TaskGraph's parameter elements on a device of `stage`: a staging slot.
template <class P>
constexpr long long staging_elems(int stage) {
  return lower::lowered<P>::largest_taskgraph(stage);
}

// Optimizer-state elements per moment on a device of `stage`: every parameter, or under
// ZeRO its chunk of each gradient bucket plus the bucket's tail.
template <class P>
constexpr long long optimizer_state_elems(int stage, int dp) {
  if (P::zero == 0) return P::stage_param_elems(stage);
  const auto& t = lower::lowered<P>::tables;
  long long e = 0;
  for (int b = 0; b < t.num_buckets[static_cast<std::size_t>(stage)]; ++b) {
    const lower::bucket& bk = t.buckets[static_cast<std::size_t>(stage)][static_cast<std::size_t>(b)];
    const long long R = (dp > 1 ? dp : 1) * P::reduction_devices(bk.axis);
    e += bk.count / R + bk.count % R;
  }
  return e;
}

// Weights in device memory: the masters (unless offloaded; Zero<3>: this device's
// chunks), plus the compute-type copies in mixed precision — or, staged (Offload,
// CastWeightsPerUse, Zero<3>), two TaskGraph slots in the compute type and, where the
// masters reach the device first (offloaded or gathered in mixed precision), one slot of
// masters.
template <class P>
constexpr long long parameter_bytes(int stage, int dp) {
  const long long n = P::zero >= 3 ? optimizer_state_elems<P>(stage, dp) : P::stage_param_elems(stage);
  const long long mb = P::master_bytes, eb = P::element_bytes;
  if constexpr (!P::staged_weights) return n * (P::mixed_precision ? mb + eb : eb);
  const bool off = P::offload != offload_level::none;
  const long long slot = staging_elems<P>(stage);
  return (off ? 0 : n * mb) + 2 * slot * eb + ((off || P::zero >= 3) && P::mixed_precision ? slot * mb : 0);
}

// Zero<2/3>'s gradient slots on a device of `stage` (lower::lowered::gradient_slots).
template <class P>
constexpr int gradient_slots(int stage) {
  return lower::lowered<P>::gradient_slots(stage);
}

// Gradients, in master precision: whole, or under Zero<2/3> this device's chunks plus the
// gradient slots a backward writes before its buckets are reduce-scattered.
template <class P>
constexpr long long gradient_bytes(int stage, int dp) {
  if (P::zero >= 2)
    return (optimizer_state_elems<P>(stage, dp) + gradient_slots<P>(stage) * staging_elems<P>(stage)) * P::master_bytes;
  return P::stage_param_elems(stage) * P::master_bytes;
}

// Adam/AdamW keep two moments per parameter (SGD with momentum one); ZeRO divides them.
template <class P>
constexpr long long adam_state_bytes(int stage, int dp) {
  if constexpr (P::offload == offload_level::weights_and_state) return 0;  // in host memory
  return 2 * optimizer_state_elems<P>(stage, dp) * P::master_bytes;
}

// Offload: the masters (Zero<3>: this device's chunks) and the optimizer state in host memory.
template <class P>
constexpr long long host_bytes(int stage, int dp) {
  if constexpr (P::offload == offload_level::none) return 0;
  const long long masters = P::zero >= 3 ? optimizer_state_elems<P>(stage, dp) : P::stage_param_elems(stage);
  return masters * P::master_bytes +
         (P::offload == offload_level::weights_and_state ? 2 * optimizer_state_elems<P>(stage, dp) * P::master_bytes : 0);
}

// Offload: one ApplyGroups group's masters (and state) on the device during the update.
template <class P>
constexpr long long update_buffer_bytes(int stage, int dp) {
  if constexpr (P::offload == offload_level::none) return 0;
  const long long per = (optimizer_state_elems<P>(stage, dp) + P::apply_groups - 1) / P::apply_groups;
  return per * P::master_bytes * (P::offload == offload_level::weights_and_state ? 3 : 1);
}

}  // namespace strata::detail
