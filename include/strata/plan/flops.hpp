#pragma once
// The FLOP analysis: model FLOPs of a replica's step and what one device of a stage
// executes, from the sharding pass's layer plans. Plan::flops_* call these.
#include "strata/plan/sharding.hpp"

namespace strata::detail {

// Model FLOPs of one replica per step (forward + backward, all devices of the replica).
template <class P>
constexpr long long flops_per_replica_step() {
  long long f = 0;
  for (const auto& lp : P::layer_plans) f += lp.desc.forward_flops(lp.in) + lp.desc.backward_flops(lp.in);
  return f * P::replica_batch;
}

// FLOPs one device of `stage` executes per step.
template <class P>
constexpr long long device_flops_per_step(int stage) {
  long long f = 0;
  for (const auto& lp : P::layer_plans)
    if (P::stage_of_part(lp.part) == stage) f += lp.local_flops_per_sample;
  return f * P::replica_batch;
}

}  // namespace strata::detail
