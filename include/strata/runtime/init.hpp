#pragma once
// Parameter initialisation that depends only on the logical parameter (layer, tensor,
// element), never on how a plan shards it: every plan starts from the same model.
#include <cmath>
#include <cstdint>

#include "strata/layers/layer.hpp"

namespace strata::runtime {

// splitmix64: a counter-based generator, so element i is computed without a stream.
constexpr std::uint64_t mix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in [-1, 1) from (seed, layer, tensor, element), 53 random bits.
constexpr double unit_uniform(std::uint64_t seed, int layer, int tensor, std::uint64_t element) {
  std::uint64_t h = mix64(seed ^ mix64(static_cast<std::uint64_t>(layer) * 0x100000001b3ULL + static_cast<std::uint64_t>(tensor)));
  h = mix64(h ^ element);
  return static_cast<double>(h >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

// The initial value of logical element `element` of parameter `tensor` of layer `layer`.
// Linear/attention/MoE weights and biases: U(−1/√fan_in, 1/√fan_in) (PyTorch's Linear
// default); LayerNorm: γ = 1, β = 0; embeddings: U(−1, 1).
inline double initial_value(const layer_desc& d, int layer, int tensor, std::uint64_t element, std::uint64_t seed) {
  const param_t& p = d.params[static_cast<std::size_t>(tensor)];
  if (d.role == layer_role::layernorm) return tensor == 0 ? 1.0 : 0.0;
  if (d.role == layer_role::embedding) return unit_uniform(seed, layer, tensor, element);
  int fan_in = d.in_shape.rank > 0 ? d.in_shape.last() : p.shape.dim[0];
  if (d.role == layer_role::moe && tensor == 2) fan_in = p.shape.dim[1];  // experts' second matrix
  return unit_uniform(seed, layer, tensor, element) / std::sqrt(static_cast<double>(fan_in > 0 ? fan_in : 1));
}

// Logical flat index of local element `local` of a shard: on every axis the shard is
// cut on, block `block` of equal blocks.
inline std::uint64_t logical_index(const shape_t& logical, const shape_t& local, int block, std::uint64_t flat) {
  std::array<std::uint64_t, 4> idx{};
  for (int a = local.rank - 1; a >= 0; --a) {
    const auto n = static_cast<std::uint64_t>(local.dim[static_cast<std::size_t>(a)]);
    idx[static_cast<std::size_t>(a)] = flat % n;
    flat /= n;
  }
  std::uint64_t g = 0;
  for (int a = 0; a < logical.rank; ++a) {
    const auto full = static_cast<std::uint64_t>(logical.dim[static_cast<std::size_t>(a)]);
    const auto part = static_cast<std::uint64_t>(local.dim[static_cast<std::size_t>(a)]);
    const std::uint64_t i = idx[static_cast<std::size_t>(a)] + (part < full ? static_cast<std::uint64_t>(block) * part : 0);
    g = g * full + i;
  }
  return g;
}

}  // namespace strata::runtime
