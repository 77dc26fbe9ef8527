#pragma once
// A replica's batch and what a step returns.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "strata/core/agreed_error.hpp"

namespace strata {

namespace detail {
// The first member of batch_view: nothing converts to it, so a positional
// `{inputs, labels, n}` does not compile and only the named form does.
struct fields_by_name_only {
  explicit fields_by_name_only() = default;
};
}  // namespace detail

// A replica's batch for one step (or one evaluation): `samples` rows, named fields only:
//   train.step({.inputs = x, .labels = y, .samples = 64});
// inputs holds samples × P::input_elems values (the input shape row-major; token ids as
// values when an Embedding comes first), labels samples × P::labels_per_sample labels.
// Both sizes are checked against the plan. Host memory, or (backends with device memory)
// memory already on the device: then the batch is copied device to device and its values
// are checked there.
template <class T>
struct batch_view {
  [[no_unique_address]] detail::fields_by_name_only by_name_only = detail::fields_by_name_only{};
  std::span<const T> inputs;
  std::span<const std::int32_t> labels;
  std::size_t samples = 0;
};

struct step_result {
  double loss = 0.0;  // mean over the global batch
  long long correct = 0;
  long long rows = 0;  // loss rows in the global batch
  bool skipped = false;  // loss scaling: the gradients held Inf/NaN, so no update was applied
};

namespace exec {
// Replica r's share of a global batch that every rank holds whole: samples [r·n/R, (r+1)·n/R)
// (trainer::share). The global batch is the same everywhere, so a refusal is agreed.
template <class T>
batch_view<T> share_of(const batch_view<T>& global, std::size_t replicas, std::size_t r, std::size_t per_sample,
                       std::size_t labels_per_sample) {
  const std::size_t n = global.samples, d = replicas;
  auto refuse = [&](const std::string& why) { throw agreed_error("strata: share: " + why); };
  if (n % d != 0)
    refuse("the global batch holds " + std::to_string(n) + " samples, not a multiple of the " + std::to_string(d) +
           " data-parallel replicas");
  if (global.inputs.size() != n * per_sample || global.labels.size() != n * labels_per_sample)
    refuse("the global batch's inputs and labels hold " + std::to_string(global.inputs.size()) + " and " +
           std::to_string(global.labels.size()) + " values, not " + std::to_string(n) + " samples x " +
           std::to_string(per_sample) + " and x " + std::to_string(labels_per_sample));
  const std::size_t per = n / d, first = r * per;
  return {.inputs = global.inputs.subspan(first * per_sample, per * per_sample),
          .labels = global.labels.subspan(first * labels_per_sample, per * labels_per_sample),
          .samples = per};
}
}  // namespace exec

}  // namespace strata
