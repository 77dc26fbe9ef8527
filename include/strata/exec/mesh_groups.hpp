#pragma once
// The communicators of a 2D/2.5D/3D tensor mesh: its rows, columns and depths (the layers'
// own collectives) and the gradient groups of tensors that repeat along them (depth
// layers, mesh columns, depth planes, each × replicas). Formed once, in the same order on
// every rank; each group named by its lowest rank. Empty for 1D plans.
#include <array>
#include <cstddef>
#include <optional>
#include <string>

#include "strata/core/communicator.hpp"
#include "strata/core/sbp.hpp"
#include "strata/strategy/options.hpp"

namespace strata::exec {

template <class P, class Comm>
class mesh_groups {
 public:
  static constexpr std::array<group_axis, 6> axes{group_axis::mesh_row,   group_axis::mesh_col,
                                                  group_axis::mesh_depth, group_axis::depth_data,
                                                  group_axis::col_data,   group_axis::plane_data};

  // Collective over `world` (every rank calls it; nothing happens for 1D plans).
  void form(Comm& world, const std::string& base) {
    if constexpr (P::mode != tensor_mode::d1)
      for (std::size_t a = 0; a < axes.size(); ++a) {
        int first = world.rank();
        for (int r = 0; r < world.size(); ++r)
          if (P::same_group(axes[a], world.rank(), r, world.size())) {
            first = r;
            break;
          }
        comms_.at(a).emplace(
            comm::split_named(world, first, world.rank(), base + "." + std::string(to_string(axes[a]))));
      }
  }

  // The communicator of `axis`, or null where this plan has none.
  Comm* of(group_axis axis) {
    for (std::size_t k = 0; k < axes.size(); ++k)
      if (axes[k] == axis && comms_[k]) return &*comms_[k];
    return nullptr;
  }

  // Each gradient group that is formed (the ones buckets are reduced over).
  template <class F>
  void each_reduction_group(F&& f) {
    for (std::size_t a = 3; a < axes.size(); ++a)
      if (comms_[a]) f(*comms_[a]);
  }

 private:
  std::array<std::optional<Comm>, 6> comms_;
};

}  // namespace strata::exec
