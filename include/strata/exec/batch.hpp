#pragma once
// A replica's batch and what a step returns.
#include <cstddef>
#include <cstdint>

namespace strata {

// A replica's batch for one step (or one evaluation chunk): `samples` rows of the
// model's input (each input_shape.numel() values) and labels for the loss rows.
// Host memory, or (backends with device memory) memory already on the device: then
// the batch is copied device to device and its values are checked there.
template <class T>
struct batch_view {
  const T* inputs = nullptr;
  const std::int32_t* labels = nullptr;
  std::size_t samples = 0;
  std::size_t input_elems = 0;  // values per sample, checked against the plan
  std::size_t labels_per_sample = 1;
};

struct step_result {
  double loss = 0.0;  // mean over the global batch
  long long correct = 0;
  long long rows = 0;  // loss rows in the global batch
};

}  // namespace strata
