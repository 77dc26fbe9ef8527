#pragma once
// The communicators of one device: its pipeline part's devices, its data-parallel group,
// the part × data group, and a 2D/2.5D/3D mesh's groups (exec/mesh_groups.hpp) — split
// once from the world, in the same order on every rank, named for the watchdog's
// messages where the communicator takes names — and the one for each planner group axis.
#include <optional>
#include <stdexcept>
#include <string>

#include "strata/core/communicator.hpp"
#include "strata/core/sbp.hpp"
#include "strata/exec/mesh_groups.hpp"
#include "strata/plan/plan.hpp"

namespace strata::exec {

template <class P, class Comm>
class device_groups {
 public:
  device_groups(Comm& world, rank_coord me) {
    const int n = P::part_devices;
    std::string base = "world";
    if constexpr (requires { world.name(); }) base = std::string(world.name());
    part_.emplace(comm::split_named(world, me.data * P::stages + me.stage, me.index, base + ".part"));
    data_.emplace(comm::split_named(world, me.stage * n + me.index, me.data, base + ".data"));
    part_data_.emplace(comm::split_named(world, me.stage, world.rank(), base + ".part_data"));
    mesh_.form(world, base);
    // Context<N, Split<T>>: its tensor groups (same context index), context groups (same
    // tensor index) and their replicas (the sharded parameters' reduction group)
    if constexpr (P::context_tensor > 1) {
      const int T = P::context_tensor, replica_stage = me.data * P::stages + me.stage;
      tensor_.emplace(comm::split_named(world, replica_stage * P::context + me.cp, me.tp, base + ".tensor"));
      context_.emplace(comm::split_named(world, replica_stage * T + me.tp, me.cp, base + ".context"));
      context_data_.emplace(
          comm::split_named(world, me.stage * T + me.tp, me.data * P::context + me.cp, base + ".context_data"));
    }
    // a tied tensor whose copies lie on two stages: the pair of devices at each place
    // (replica, device of the part) of those stages sums them; every other rank is alone
    if constexpr (P::tie.any()) {
      const int a = P::stage_of_part(P::layer_plans[static_cast<std::size_t>(P::tie.owner)].part);
      const int b = P::stage_of_part(P::layer_plans[static_cast<std::size_t>(P::tie.user)].part);
      if (a != b) {
        const bool member = me.stage == a || me.stage == b;
        tie_.emplace(comm::split_named(world, member ? me.data * n + me.index : world.size() + world.rank(), me.stage,
                                       base + ".tie"));
      }
    }
  }
  // The pair of devices summing a tied tensor's copies, or null (no tie, or one stage holds both).
  Comm* tie() { return tie_ ? &*tie_ : nullptr; }

  Comm& part() { return *part_; }
  // The reduction group of parameter group g: 0 the data-parallel group, 1 part × data.
  Comm& group(int g) { return g == 0 ? axis(P::shard_axis) : *part_data_; }
  // The communicator of a planner group (plan/sharding.hpp's group_axis).
  Comm& axis(group_axis a) {
    switch (a) {
      case group_axis::data: return *data_;
      case group_axis::part_data: return *part_data_;
      case group_axis::part:
      case group_axis::pipeline: return *part_;
      // Context<N> alone: its context group is the part
      case group_axis::context: return context_ ? *context_ : *part_;
      case group_axis::tensor:
        if (tensor_) return *tensor_;
        break;
      case group_axis::context_data:
        if (context_data_) return *context_data_;
        break;
      default: break;
    }
    if (Comm* c = mesh_.of(a)) return *c;
    throw std::logic_error("strata: the plan names the " + std::string(to_string(a)) +
                           " group, which this device did not form");
  }
  // Every group gradients are reduced over: the two parameter groups and the mesh's.
  template <class F>
  void each_reduction_group(F&& f) {
    f(*data_);
    f(*part_data_);
    if (context_data_) f(*context_data_);
    mesh_.each_reduction_group(f);
  }

 private:
  std::optional<Comm> part_, data_, part_data_, tie_, tensor_, context_, context_data_;
  mesh_groups<P, Comm> mesh_;
};

}  // namespace strata::exec
