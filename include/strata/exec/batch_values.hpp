#pragma once
// The values a plan accepts in a batch, checked on the host on every rank before a step
// (trainer::check_batch): token ids, when an Embedding reads the input, integers in
// [0, vocabulary); labels in [0, classes) or ignore_label (a row that does not count).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "strata/core/ignore_label.hpp"
#include "strata/plan/lower.hpp"

namespace strata::exec {

// A layer of the plan adds an auxiliary loss (MoE's load balancing).
template <class P>
inline constexpr bool has_aux_loss = [] {
  for (const auto& c : lower::lowered<P>::tables.calls)
    if (c.aux_loss) return true;
  return false;
}();

// The first problem found, or empty.
template <class P, bool TokenIds, class M>
std::string batch_value_problem(std::span<const M> ids, std::span<const std::int32_t> labels) {
  // token ids are checked here, on every rank, not only where the embedding runs
  if constexpr (TokenIds) {
    const double vocab = double(P::vocabulary);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const double id = static_cast<double>(ids[i]);
      if (!(id >= 0 && id < vocab && id == std::floor(id)))
        return "token id " + std::to_string(id) + " at position " + std::to_string(i) + " is not an integer in [0, " +
               std::to_string(P::vocabulary) + ")";
    }
  }
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if ((labels[i] < 0 || labels[i] >= P::classes) && labels[i] != ignore_label)
      return "label " + std::to_string(labels[i]) + " at position " + std::to_string(i) + " is outside [0, " +
             std::to_string(P::classes) + ") and is not " + std::to_string(ignore_label) + " (ignored)";
    // the step's rescale to the counted rows would scale an auxiliary loss's gradient too
    if (labels[i] == ignore_label && has_aux_loss<P>)
      return "label " + std::to_string(ignore_label) + " (ignored) at position " + std::to_string(i) +
             ": ignored labels are not supported with an auxiliary loss (MoE) yet";
  }
  return {};
}

}  // namespace strata::exec
