#pragma once
// The label of a row that does not count (PyTorch's ignore_index, −100): a
// masked-language-model batch labels only its masked positions. The loss kernels give
// such a row no loss and no gradient, the books skip it, and the trainer averages the
// step's loss over the rows that counted in the whole global batch.
#include <cstdint>

namespace strata {
inline constexpr std::int32_t ignore_label = -100;
}  // namespace strata
