#pragma once
// strata-header: host-only
// strata/data/token_windows.hpp - language-model training windows from a token file
// (token_file.hpp), shuffled from a seed, the same global batch on every rank, each
// data-parallel replica reading its own slice; and the reading position, saved into and
// restored from a checkpoint's user entries.
//
// Windows. With context `seq`, window w holds ids [w·seq, w·seq + seq + 1): its first seq
// ids are the inputs, its last seq ids the labels (each input's next id). Consecutive
// windows share one id, so a file of `count` ids holds N = (count - 1) / seq windows; the
// ids after the last window are never read.
//
// Order: shard_plan's contract (sharding.hpp) on the N windows. Epoch e visits them in
// epoch_permutation(N, seed, e) (splitmix64 Fisher-Yates: the same on every rank and
// toolchain). The reading position is (epoch, offset): offset windows of the epoch's order
// are consumed. A step reads the global batch P_e[offset, offset + G), G = replicas ×
// per_replica, cut into `replicas` contiguous slices; replica r reads slice r, so the slices
// in replica order are the batch one replica of batch G would read. Then offset += G. When
// fewer than G windows are left in the epoch, they are skipped and the step starts epoch
// e + 1 at offset 0 (remainder::drop). From the origin, step s reads exactly what
// shard_plan(N, r, replicas, per_replica, seed).indices(P_e, s % steps) of epoch s / steps
// names.
//
// Resuming: checkpoint_entries() gives the position (and what identifies the windows: seq,
// seed, the file's id count, vocab and tag) as strings for checkpoint_info::user;
// restore() reads them back, so a resumed run reads exactly the windows the uninterrupted
// run would. The position counts windows, not steps: a run resumed with another number of
// replicas or batch continues from the same window. Entries that are missing, not whole
// numbers, or written for other windows are a data_error naming the token file and the
// entry.
//
// Under MPI every rank opens the file and builds its reader; wrap that in an agreement
// (examples/agreed_load.hpp) so a file bad on one node ends every rank with its message.
#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

#include "strata/data/data_error.hpp"
#include "strata/data/sharding.hpp"
#include "strata/data/token_file.hpp"

namespace strata::data {

// A replica's windows for one step: `samples` windows, inputs and labels samples × seq each.
// The fields are those of the trainer's batch: train.step({.inputs = b.inputs,
// .labels = b.labels, .samples = b.samples}).
template <class M>
struct token_batch {
  std::vector<M> inputs;             // ids as values of M (an Embedding's input)
  std::vector<std::int32_t> labels;  // the next id of each input
  std::size_t samples = 0;
};

// Where a window_reader stands: `offset` windows of epoch `epoch`'s order are consumed.
struct window_position {
  std::uint64_t epoch = 0;
  std::uint64_t offset = 0;
  friend bool operator==(const window_position&, const window_position&) = default;
};

namespace detail {

// Ids [w·seq, w·seq + seq + 1) of `tokens` appended to `out` as inputs and labels.
template <class M>
void add_window(const token_file& tokens, std::uint64_t w, std::size_t seq, std::vector<std::uint32_t>& scratch,
                token_batch<M>& out) {
  scratch.resize(seq + 1);
  tokens.copy(w * seq, scratch);
  for (std::size_t t = 0; t < seq; ++t) {
    out.inputs.push_back(static_cast<M>(scratch[t]));
    out.labels.push_back(static_cast<std::int32_t>(scratch[t + 1]));
  }
  ++out.samples;
}

// Every id of `tokens` is exact as a value of M (ids travel as inputs of that type).
template <class M>
void require_exact_ids(const token_file& tokens) {
  static_assert(std::is_arithmetic_v<M>, "token ids travel as an arithmetic type");
  const std::uint64_t top = tokens.vocab() - 1;
  bool exact = true;
  if constexpr (std::is_floating_point_v<M>)
    exact = std::numeric_limits<M>::digits >= 64 || top <= (std::uint64_t{1} << std::numeric_limits<M>::digits);
  else
    exact = top <= static_cast<std::uint64_t>(std::numeric_limits<M>::max());
  if (!exact)
    throw data_error(tokens.path(), "ids up to " + std::to_string(top) + " (vocab " + std::to_string(tokens.vocab()) +
                                        ") are not all exact as input values of this element type");
}

// Windows of context seq in `tokens`, or a data_error when there is not one.
inline std::uint64_t window_count(const token_file& tokens, std::size_t seq) {
  if (seq < 1) throw std::invalid_argument("token windows: the context must be at least 1 id");
  if (tokens.size() < std::uint64_t{seq} + 1)
    throw data_error(tokens.path(), "holds " + std::to_string(tokens.size()) + " ids; a window of context " +
                                        std::to_string(seq) + " needs " + std::to_string(seq + 1));
  if (tokens.vocab() > std::uint64_t{1} << 31)
    throw data_error(tokens.path(), "vocab " + std::to_string(tokens.vocab()) +
                                        " exceeds 2^31, the labels' int32 range");
  return (tokens.size() - 1) / seq;
}

inline std::optional<std::uint64_t> parse_count(const std::string& s) {
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace detail

// Reads shuffled training windows of one token file for one data-parallel replica (see the
// top). Holds a reference to the token file, which must outlive it.
class window_reader {
 public:
  window_reader(const token_file& tokens, std::size_t seq, int replica, int replicas, std::size_t per_replica,
                std::uint64_t seed)
      : tokens_(&tokens), seq_(seq), replica_(replica), replicas_(replicas), per_replica_(per_replica), seed_(seed) {
    if (replicas < 1) throw std::invalid_argument("window_reader: replicas must be >= 1, got " + std::to_string(replicas));
    if (replica < 0 || replica >= replicas)
      throw std::invalid_argument("window_reader: replica " + std::to_string(replica) + " is outside [0, " +
                                  std::to_string(replicas) + ")");
    if (per_replica < 1) throw std::invalid_argument("window_reader: per_replica must be >= 1");
    windows_ = detail::window_count(tokens, seq);
    if (windows_ < global_batch())
      throw data_error(tokens.path(), "holds " + std::to_string(tokens.size()) + " ids, " + std::to_string(windows_) +
                                          " windows of context " + std::to_string(seq) + ", fewer than a global batch of " +
                                          std::to_string(global_batch()) + " (" + std::to_string(replicas) +
                                          " replicas x " + std::to_string(per_replica) + ")");
  }
  window_reader(token_file&&, std::size_t, int, int, std::size_t, std::uint64_t) = delete;  // would dangle

  const token_file& tokens() const noexcept { return *tokens_; }
  std::size_t seq() const noexcept { return seq_; }
  int replica() const noexcept { return replica_; }
  int replicas() const noexcept { return replicas_; }
  std::size_t per_replica() const noexcept { return per_replica_; }
  std::uint64_t seed() const noexcept { return seed_; }
  std::uint64_t windows() const noexcept { return windows_; }
  std::uint64_t global_batch() const noexcept { return std::uint64_t(replicas_) * per_replica_; }
  std::uint64_t steps_per_epoch() const noexcept { return windows_ / global_batch(); }

  window_position position() const noexcept { return pos_; }
  // Continues from p (an offset up to windows(): at the end of an epoch the next step starts
  // the next one).
  void seek(window_position p) {
    if (p.offset > windows_)
      throw std::out_of_range("window_reader: offset " + std::to_string(p.offset) + " is beyond the " +
                              std::to_string(windows_) + " windows of an epoch");
    pos_ = p;
  }
  // The position after `steps` steps from the origin with this reader's global batch.
  window_position position_after(std::uint64_t steps) const noexcept {
    return {steps / steps_per_epoch(), steps % steps_per_epoch() * global_batch()};
  }

  // The windows replica r reads at the next step (the reader does not move).
  std::vector<std::uint64_t> next_windows(int r) const {
    if (r < 0 || r >= replicas_)
      throw std::out_of_range("window_reader: replica " + std::to_string(r) + " is outside [0, " +
                              std::to_string(replicas_) + ")");
    const window_position p = step_start();
    const std::vector<std::int64_t>& perm = permutation(p.epoch);
    std::vector<std::uint64_t> w(per_replica_);
    const std::uint64_t first = p.offset + std::uint64_t(r) * per_replica_;
    for (std::size_t i = 0; i < per_replica_; ++i) w[i] = static_cast<std::uint64_t>(perm[first + i]);
    return w;
  }

  // This replica's windows of the next step; the reader moves on by one global batch.
  template <class M>
  void next_into(token_batch<M>& out) {
    detail::require_exact_ids<M>(*tokens_);
    const std::vector<std::uint64_t> w = next_windows(replica_);
    out.inputs.clear(), out.labels.clear(), out.samples = 0;
    out.inputs.reserve(per_replica_ * seq_), out.labels.reserve(per_replica_ * seq_);
    for (const std::uint64_t x : w) detail::add_window(*tokens_, x, seq_, scratch_, out);
    const window_position p = step_start();
    pos_ = {p.epoch, p.offset + global_batch()};
  }
  template <class M>
  token_batch<M> next() {
    token_batch<M> b;
    next_into(b);
    return b;
  }

  // The position and what identifies these windows, as checkpoint user entries.
  std::map<std::string, std::string> checkpoint_entries(const std::string& prefix = "data.") const {
    std::map<std::string, std::string> e;
    for (const auto& [key, value] : identity()) e[prefix + key] = std::to_string(value);
    e[prefix + "epoch"] = std::to_string(pos_.epoch);
    e[prefix + "offset"] = std::to_string(pos_.offset);
    return e;
  }
  // Continues from the position in `entries` (checkpoint_info::user), after checking that
  // they were written for these windows.
  void restore(const std::map<std::string, std::string>& entries, const std::string& prefix = "data.") {
    auto number = [&](const std::string& key) {
      const auto it = entries.find(prefix + key);
      if (it == entries.end())
        throw data_error(tokens_->path(), "the checkpoint has no entry " + prefix + key + " (no reading position saved)");
      const std::optional<std::uint64_t> v = detail::parse_count(it->second);
      if (!v) throw data_error(tokens_->path(), "checkpoint entry " + prefix + key + " \"" + it->second +
                                                    "\" is not a whole number");
      return *v;
    };
    for (const auto& [key, mine] : identity())
      if (const std::uint64_t theirs = number(key); theirs != mine)
        throw data_error(tokens_->path(), "the checkpoint's reading position is for other windows: its " + prefix + key +
                                              " is " + std::to_string(theirs) + ", this reader's " + std::to_string(mine));
    const window_position p{number("epoch"), number("offset")};
    if (p.offset > windows_)
      throw data_error(tokens_->path(), "checkpoint entry " + prefix + "offset " + std::to_string(p.offset) +
                                            " is beyond the " + std::to_string(windows_) + " windows of an epoch");
    pos_ = p;
  }

 private:
  std::vector<std::pair<std::string, std::uint64_t>> identity() const {
    return {{"seq", seq_}, {"seed", seed_}, {"ids", tokens_->size()}, {"vocab", tokens_->vocab()},
            {"tag", tokens_->tag()}};
  }
  // Where the next step starts: the current position, or the next epoch's start when fewer
  // than a global batch of windows are left.
  window_position step_start() const noexcept {
    return pos_.offset + global_batch() <= windows_ ? pos_ : window_position{pos_.epoch + 1, 0};
  }
  const std::vector<std::int64_t>& permutation(std::uint64_t epoch) const {
    if (!perm_epoch_ || *perm_epoch_ != epoch) {
      perm_ = epoch_permutation(static_cast<std::int64_t>(windows_), seed_, epoch);
      perm_epoch_ = epoch;
    }
    return perm_;
  }

  const token_file* tokens_;
  std::size_t seq_;
  int replica_, replicas_;
  std::size_t per_replica_;
  std::uint64_t seed_;
  std::uint64_t windows_ = 0;
  window_position pos_{};
  mutable std::vector<std::int64_t> perm_;
  mutable std::optional<std::uint64_t> perm_epoch_;
  std::vector<std::uint32_t> scratch_;
};

// A replica's share of the evaluation windows and how many of them are real.
template <class M>
struct evaluation_share {
  token_batch<M> batch;
  std::size_t valid = 0;
};

// The first min(max_windows, N) windows in file order (no shuffle), replica r of `replicas`
// taking windows r, r + replicas, ...; padded with copies of window 0 to a positive multiple
// of `multiple` samples (batch.samples), of which the first `valid` are real.
template <class M>
evaluation_share<M> evaluation_windows(const token_file& tokens, std::size_t seq, std::uint64_t max_windows,
                                       int replica, int replicas, std::size_t multiple) {
  if (replicas < 1 || replica < 0 || replica >= replicas)
    throw std::invalid_argument("evaluation_windows: replica " + std::to_string(replica) + " of " +
                                std::to_string(replicas));
  if (multiple < 1) throw std::invalid_argument("evaluation_windows: multiple must be >= 1");
  detail::require_exact_ids<M>(tokens);
  const std::uint64_t n = std::min(detail::window_count(tokens, seq), max_windows);
  evaluation_share<M> s;
  std::vector<std::uint32_t> scratch;
  for (std::uint64_t w = std::uint64_t(replica); w < n; w += std::uint64_t(replicas))
    detail::add_window(tokens, w, seq, scratch, s.batch);
  s.valid = s.batch.samples;
  while (s.batch.samples % multiple != 0 || s.batch.samples == 0) detail::add_window(tokens, 0, seq, scratch, s.batch);
  return s;
}

}  // namespace strata::data
