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
// Grouped-query attention: `group` query items share each key/value item, so k and v hold
// kv_items() = items/group items and query item i reads kv item i mod kv_items() — the
// query items of kv item k are k, k + kv_items(), ...: the order heads_from_rows gives with
// parts = group + 2 on token rows holding, per kv head, its group's query blocks, k and v.
struct flash_shape {
  std::size_t items = 0, group = 1, q_len = 0, k_len = 0, dh = 0;
  long long q0 = 0, k0 = 0;
  double scale = 1.0;
  bool causal = false;

  STRATA_HD std::size_t kv_items() const { return items / group; }
  // The key/value item query item `item` reads, and member m (< group) of kv item k's group.
  STRATA_HD std::size_t kv_item_of(std::size_t item) const { return item % kv_items(); }
  STRATA_HD std::size_t query_item(std::size_t k, std::size_t m) const { return k + m * kv_items(); }

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
