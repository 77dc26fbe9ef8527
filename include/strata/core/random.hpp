#pragma once
// Counter-based random numbers: a value is computed from its coordinates alone
// (seed, layer, tensor, element), never from a stream, so it is the same whatever
// the sharding, the rank or the thread that asks.
#include <cstdint>

#include "strata/core/hd.hpp"

namespace strata {

// The splitmix64 output finaliser (Steele, Lea & Flood 2014): a bijection on 64-bit words.
STRATA_HD constexpr std::uint64_t splitmix64_mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// One splitmix64 step from state z: element i of a stream is mix64(i) with no stream.
STRATA_HD constexpr std::uint64_t mix64(std::uint64_t z) { return splitmix64_mix(z + 0x9e3779b97f4a7c15ULL); }

// Uniform in [-1, 1) from (seed, layer, tensor, element), 53 random bits.
STRATA_HD constexpr double unit_uniform(std::uint64_t seed, int layer, int tensor, std::uint64_t element) {
  std::uint64_t h = mix64(seed ^ mix64(static_cast<std::uint64_t>(layer) * 0x100000001b3ULL + static_cast<std::uint64_t>(tensor)));
  h = mix64(h ^ element);
  return static_cast<double>(h >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

}  // namespace strata
