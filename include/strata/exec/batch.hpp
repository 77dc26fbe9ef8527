#pragma once
// A replica's batch and what a step returns.
#include <cstddef>
#include <cstdint>
#include <span>

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

}  // namespace strata
