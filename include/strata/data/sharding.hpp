// strata/data/sharding.hpp - deterministic epoch shuffling and data-parallel
// sharding of sample indices, independent of what the samples are.
//
// Contract (what every rank can rely on without talking to the others):
//  * Epoch e visits the samples in the order P_e, a permutation of [0, N) that
//    depends only on (seed, e, N). It is produced by the generator below with
//    our own Fisher-Yates, not std::shuffle / std::uniform_int_distribution,
//    whose outputs differ between standard libraries: ranks built with
//    different toolchains must still agree on P_e bit for bit.
//  * Step s consumes the global batch P_e[s*G .. s*G+G) with G = dp_size * B.
//    It is cut into dp_size contiguous shards of B samples; rank r takes shard
//    r. So concatenating the ranks' batches in rank order gives exactly the
//    global batch (same set, same order) that one device with batch G would
//    see: dp_size changes how a step is split, never what a step trains on.
//  * remainder::drop (training): steps = floor(N / G). The final incomplete
//    global batch is skipped, so every rank takes the same number of steps with
//    full batches; unequal step counts would leave some ranks waiting forever in
//    a collective.
//  * remainder::pad (evaluation): steps = ceil(N / G). Positions p >= N wrap to
//    P_e[p mod N]. Each rank's batch keeps its real samples first, so a count
//    `valid` says which entries to score; over one epoch the valid entries of
//    all ranks cover every sample exactly once.
//
// Generator: splitmix64 (Steele, Lea & Flood 2014):
//    state += 0x9e3779b97f4a7c15;  z = state;
//    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
//    z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
//    return z ^ (z >> 31);
// The epoch-e stream starts from state mix64(seed ^ mix64(e + 0x9e3779b97f4a7c15)),
// where mix64 is the three finaliser lines above (strata::splitmix64_mix). Integers in [0, n) use
// rejection: draw r until r >= (2^64 - n) mod n, return r mod n (unbiased).
// Fisher-Yates: p = identity; for i = N-1 down to 1: swap(p[i], p[below(i+1)]).
#ifndef STRATA_DATA_SHARDING_HPP
#define STRATA_DATA_SHARDING_HPP

#include <cstdint>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "strata/core/random.hpp"

namespace strata::data {

// Small, fully specified PRNG, so shuffles are reproducible everywhere.
class splitmix64 {
 public:
  explicit constexpr splitmix64(std::uint64_t state) noexcept : state_(state) {}

  constexpr std::uint64_t next() noexcept {
    state_ += 0x9e3779b97f4a7c15ULL;
    return splitmix64_mix(state_);
  }

  // Uniform in [0, n), n >= 1, by rejection (no modulo bias).
  constexpr std::uint64_t below(std::uint64_t n) noexcept {
    const std::uint64_t threshold = (0 - n) % n;  // == 2^64 mod n
    for (;;) {
      const std::uint64_t r = next();
      if (r >= threshold) return r % n;
    }
  }

  constexpr std::uint64_t state() const noexcept { return state_; }

 private:
  std::uint64_t state_;
};

// Independent-looking stream for each (seed, epoch) pair.
constexpr splitmix64 epoch_generator(std::uint64_t seed, std::uint64_t epoch) noexcept {
  return splitmix64(splitmix64_mix(seed ^ splitmix64_mix(epoch + 0x9e3779b97f4a7c15ULL)));
}

enum class remainder { drop, pad };
enum class ordering { shuffled, sequential };

// Order of samples in an epoch: a seeded Fisher-Yates permutation, or the
// identity for ordering::sequential (evaluation needs no shuffle).
inline std::vector<std::int64_t> epoch_permutation(std::int64_t n, std::uint64_t seed, std::uint64_t epoch,
                                                   ordering ord = ordering::shuffled) {
  if (n < 0) throw std::invalid_argument("epoch_permutation: n must be >= 0, got " + std::to_string(n));
  std::vector<std::int64_t> p(static_cast<std::size_t>(n));
  std::iota(p.begin(), p.end(), std::int64_t{0});
  if (ord == ordering::shuffled) {
    splitmix64 g = epoch_generator(seed, epoch);
    for (std::int64_t i = n - 1; i > 0; --i) {
      const auto j = static_cast<std::int64_t>(g.below(static_cast<std::uint64_t>(i) + 1));
      std::swap(p[static_cast<std::size_t>(i)], p[static_cast<std::size_t>(j)]);
    }
  }
  return p;
}

// Which samples one data-parallel rank takes at each step (see file comment).
class shard_plan {
 public:
  shard_plan(std::int64_t num_samples, int dp_rank, int dp_size, int batch_per_rank, std::uint64_t seed,
             remainder rule = remainder::drop, ordering ord = ordering::shuffled)
      : n_(num_samples), rank_(dp_rank), size_(dp_size), batch_(batch_per_rank), seed_(seed), rule_(rule),
        ord_(ord) {
    if (dp_size < 1) throw std::invalid_argument("shard_plan: dp_size must be >= 1, got " + std::to_string(dp_size));
    if (dp_rank < 0 || dp_rank >= dp_size) {
      throw std::invalid_argument("shard_plan: dp_rank " + std::to_string(dp_rank) + " is outside [0, " +
                                  std::to_string(dp_size) + ")");
    }
    if (batch_per_rank < 1) {
      throw std::invalid_argument("shard_plan: batch_per_rank must be >= 1, got " + std::to_string(batch_per_rank));
    }
    if (num_samples < 0) {
      throw std::invalid_argument("shard_plan: num_samples must be >= 0, got " + std::to_string(num_samples));
    }
    // Zero training steps would "succeed" while training nothing; refuse instead.
    if (rule == remainder::drop && num_samples < global_batch()) {
      throw std::invalid_argument("shard_plan: global batch " + std::to_string(global_batch()) + " (" +
                                  std::to_string(dp_size) + " ranks x " + std::to_string(batch_per_rank) +
                                  ") exceeds the " + std::to_string(num_samples) +
                                  " samples, so remainder::drop would give 0 steps per epoch");
    }
  }

  std::int64_t num_samples() const noexcept { return n_; }
  int dp_rank() const noexcept { return rank_; }
  int dp_size() const noexcept { return size_; }
  int batch_per_rank() const noexcept { return batch_; }
  std::int64_t global_batch() const noexcept { return std::int64_t{size_} * batch_; }
  std::uint64_t seed() const noexcept { return seed_; }
  remainder rule() const noexcept { return rule_; }
  ordering order() const noexcept { return ord_; }

  // Same on every rank by construction.
  std::int64_t steps_per_epoch() const noexcept {
    const std::int64_t g = global_batch();
    return rule_ == remainder::drop ? n_ / g : (n_ + g - 1) / g;
  }

  // Position in the epoch order of `rank`'s first sample at `step`.
  std::int64_t shard_begin(std::int64_t step, int rank) const noexcept {
    return step * global_batch() + std::int64_t{rank} * batch_;
  }
  std::int64_t shard_begin(std::int64_t step) const noexcept { return shard_begin(step, rank_); }

  // Real (non-padding) samples in `rank`'s batch at `step`; always batch_per_rank in drop mode.
  std::int64_t valid_in_step(std::int64_t step, int rank) const noexcept {
    const std::int64_t left = n_ - shard_begin(step, rank);
    return left <= 0 ? 0 : (left < batch_ ? left : batch_);
  }
  std::int64_t valid_in_step(std::int64_t step) const noexcept { return valid_in_step(step, rank_); }

  // Real samples `rank` sees over a whole epoch. Summed over ranks this is
  // steps*G in drop mode and exactly N in pad mode.
  std::int64_t valid_per_epoch(int rank) const noexcept {
    const std::int64_t steps = steps_per_epoch();
    if (steps == 0) return 0;
    return (steps - 1) * batch_ + valid_in_step(steps - 1, rank);
  }
  std::int64_t valid_per_epoch() const noexcept { return valid_per_epoch(rank_); }

  std::vector<std::int64_t> permutation(std::uint64_t epoch) const {
    return epoch_permutation(n_, seed_, epoch, ord_);
  }

  // This rank's sample indices at `step`, given the epoch's permutation.
  // Always batch_per_rank entries; entries past valid_in_step(step) are wrap-around padding.
  void indices(std::span<const std::int64_t> perm, std::int64_t step, std::span<std::int64_t> out) const {
    check_step(step);
    if (static_cast<std::int64_t>(perm.size()) != n_) {
      throw std::invalid_argument("shard_plan::indices: permutation has " + std::to_string(perm.size()) +
                                  " entries for " + std::to_string(n_) + " samples");
    }
    if (static_cast<std::int64_t>(out.size()) != batch_) {
      throw std::invalid_argument("shard_plan::indices: output has " + std::to_string(out.size()) +
                                  " entries, batch_per_rank is " + std::to_string(batch_));
    }
    const std::int64_t begin = shard_begin(step);
    for (std::int64_t i = 0; i < batch_; ++i) {
      const std::int64_t p = begin + i;
      out[static_cast<std::size_t>(i)] = perm[static_cast<std::size_t>(p < n_ ? p : p % n_)];
    }
  }
  std::vector<std::int64_t> indices(std::span<const std::int64_t> perm, std::int64_t step) const {
    std::vector<std::int64_t> out(static_cast<std::size_t>(batch_));
    indices(perm, step, out);
    return out;
  }

  void check_step(std::int64_t step) const {
    if (step < 0 || step >= steps_per_epoch()) {
      throw std::out_of_range("shard_plan: step " + std::to_string(step) + " is outside [0, " +
                              std::to_string(steps_per_epoch()) + ")");
    }
  }

 private:
  std::int64_t n_;
  int rank_, size_, batch_;
  std::uint64_t seed_;
  remainder rule_;
  ordering ord_;
};

}  // namespace strata::data

#endif  // STRATA_DATA_SHARDING_HPP
