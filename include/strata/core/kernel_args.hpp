#pragma once
// Argument vocabulary of the kernel families every backend provides (host and CUDA
// alike), so that layers and the executor can name them without a backend.
#include <cstddef>

#include "strata/core/hd.hpp"

namespace strata::backend {

// op(X) for gemm (maps to CblasNoTrans/CblasTrans and CUBLAS_OP_N/CUBLAS_OP_T).
enum class trans : unsigned char { N, T };

// Pointwise nonlinearity fused after a bias add. gelu is the tanh approximation
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
enum class activation : unsigned char { none, relu, gelu };

// One flash-attention call (backend/attention.hpp): `items` independent (sequence, head)
// pairs, each with q_len query rows and k_len key/value rows of dh values, head-major
// ([items, len, dh]). A query's position in the whole sequence is q0 + i, a key's k0 + j;
// causal masking keeps the pairs with k0 + j <= q0 + i (so a block of a longer sequence,
// as context parallelism passes them around, masks by global positions).
struct flash_shape {
  std::size_t items = 0, q_len = 0, k_len = 0, dh = 0;
  long long q0 = 0, k0 = 0;
  double scale = 1.0;
  bool causal = false;

  // How many keys query i sees: keys [0, n). Every backend's masking reads this.
  STRATA_HD std::size_t keys_seen_by(std::size_t i) const {
    if (!causal) return k_len;
    const long long n = q0 + static_cast<long long>(i) - k0 + 1;
    return n <= 0 ? 0 : n < static_cast<long long>(k_len) ? static_cast<std::size_t>(n) : k_len;
  }
  // The first query that sees key j (causal: the one at the key's global position).
  STRATA_HD std::size_t first_query_of(std::size_t j) const {
    const long long first = causal ? k0 + static_cast<long long>(j) - q0 : 0;
    return first <= 0 ? 0 : static_cast<std::size_t>(first);
  }
};

}  // namespace strata::backend
