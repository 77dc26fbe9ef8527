#pragma once
// Parameter initialisation that depends only on the logical parameter (layer, tensor,
// element), never on how a plan shards it: every plan starts from the same model.
#include <array>
#include <cstdint>

#include "strata/layers/layer.hpp"

namespace strata::exec {

// The initial value of logical element `element` of parameter `tensor` of layer `layer`:
// the layer's rule (its init member, else its role's: layers/role_defaults.hpp).
inline double initial_value(const layer_desc& d, int layer, int tensor, std::uint64_t element, std::uint64_t seed) {
  return d.init(init_site{layer, tensor, element, seed});
}

// Logical flat index of local element `flat` of a shard: block `block` of the tensor's
// grid of equal blocks, numbered row-major over the axes the shard is cut on (one cut
// axis, as 1D plans cut: the block is the device's index; 2D/2.5D/3D cut two).
inline std::uint64_t logical_index(const shape_t& logical, const shape_t& local, int block, std::uint64_t flat) {
  std::array<std::uint64_t, 4> idx{}, at{};
  for (int a = local.rank - 1; a >= 0; --a) {
    const auto n = static_cast<std::uint64_t>(local.dim[static_cast<std::size_t>(a)]);
    idx[static_cast<std::size_t>(a)] = flat % n;
    flat /= n;
  }
  auto b = static_cast<std::uint64_t>(block);
  for (int a = logical.rank - 1; a >= 0; --a) {  // the block's coordinate on each cut axis
    const auto blocks = static_cast<std::uint64_t>(logical.dim[static_cast<std::size_t>(a)] /
                                                   local.dim[static_cast<std::size_t>(a)]);
    at[static_cast<std::size_t>(a)] = b % blocks;
    b /= blocks;
  }
  std::uint64_t g = 0;
  for (int a = 0; a < logical.rank; ++a) {
    const auto full = static_cast<std::uint64_t>(logical.dim[static_cast<std::size_t>(a)]);
    const auto part = static_cast<std::uint64_t>(local.dim[static_cast<std::size_t>(a)]);
    g = g * full + idx[static_cast<std::size_t>(a)] + at[static_cast<std::size_t>(a)] * part;
  }
  return g;
}

}  // namespace strata::exec
