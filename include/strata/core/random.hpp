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

// ---- dropout's mask ------------------------------------------------------------------------
// Element (sample, position, feature) of site `site` (a layer's index in the flat model) in
// training step `step` is dropped iff a 64-bit hash of those coordinates lies below
// rate · 2^64. Every coordinate is global — the sample's index in the step's global batch,
// the row within the sample (a token's position), the feature before any split — so the
// mask is the same under every plan (data, tensor, sequence, pipeline parallel, recomputed).
// It is split into three stages so that a kernel hashes the step once per launch, the row
// once per row and only the feature per element; dropout_keep is all three at once.

// The step's key; a domain constant keeps it apart from unit_uniform's parameter draws.
STRATA_HD constexpr std::uint64_t dropout_step_key(std::uint64_t seed, std::uint64_t step) {
  return mix64(mix64(seed ^ 0x6a09e667f3bcc909ULL) ^ step);
}
// One row's key: (site, sample, position) under the step's key.
STRATA_HD constexpr std::uint64_t dropout_row_key(std::uint64_t step_key, int site, std::uint64_t sample,
                                                  std::uint64_t position) {
  return mix64(mix64(mix64(step_key ^ static_cast<std::uint64_t>(site)) ^ sample) ^ position);
}
// Kept (true) or dropped: feature `feature` of the row whose key is row_key.
STRATA_HD constexpr bool dropout_keep_in_row(std::uint64_t row_key, std::uint64_t feature, std::uint64_t threshold) {
  return mix64(row_key ^ feature) >= threshold;
}
STRATA_HD constexpr bool dropout_keep(std::uint64_t seed, std::uint64_t step, int site, std::uint64_t sample,
                                      std::uint64_t position, std::uint64_t feature, std::uint64_t threshold) {
  return dropout_keep_in_row(dropout_row_key(dropout_step_key(seed, step), site, sample, position), feature, threshold);
}

// The threshold of rate num/den (0 <= num < den < 2^63): floor(num/den · 2^64), by long
// division, so a rate like 1/10 is exact to 2^-64 (a double would round it first).
STRATA_HD constexpr std::uint64_t dropout_threshold(std::uint64_t num, std::uint64_t den) {
  std::uint64_t q = 0, r = num;  // r < den < 2^63: r << 1 does not overflow
  for (int b = 0; b < 64; ++b) {
    r <<= 1;
    q <<= 1;
    if (r >= den) r -= den, q |= 1;
  }
  return q;
}

}  // namespace strata
