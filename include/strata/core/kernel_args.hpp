#pragma once
// Argument vocabulary of the kernel families every backend provides (host and CUDA
// alike), so that layers and the executor can name them without a backend.
#include <cstddef>
#include <cstdint>

#include "strata/core/hd.hpp"
#include "strata/core/random.hpp"

namespace strata::backend {

// op(X) for gemm (maps to CblasNoTrans/CblasTrans and CUBLAS_OP_N/CUBLAS_OP_T).
enum class trans : unsigned char { N, T };

// Pointwise nonlinearity fused after a bias add. gelu is the tanh approximation
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
enum class activation : unsigned char { none, relu, gelu };

// Attention dropout (flash_shape::drop): each probability p_ij, after the softmax, kept with
// probability 1 − rate and scaled by 1/(1 − rate), or dropped, by dropout_keep_in_row at the
// element's global coordinates (core/random.hpp), never stored — the backward recomputes it:
// row key (site, sample, query position q0 + i), feature head·stride + key position k0 + j.
// Query item b of kv item k = b mod kv_items() (group member b / kv_items()) belongs to
// sequence k / heads and kv head k mod heads, i.e. query head head0 + (k mod heads)·group +
// member: the layout heads_from_rows gives a layer's [seqs, kv heads] items.
struct flash_dropout {
  const std::uint64_t* key = nullptr;  // the step's key (backend memory); null: no dropout
  int site = 0;                        // the layer's index in the flat model
  std::uint64_t sample0 = 0;           // the global sample of the call's first sequence
  std::uint64_t head0 = 0;             // the global index of the call's first query head
  std::size_t heads = 1;               // kv heads per sequence among the call's kv items
  std::uint64_t stride = 0;            // features per head: the whole sequence's key count
  std::uint64_t threshold = 0;         // dropped iff the hash lies below (dropout_threshold)
  double scale = 1.0;                  // 1 / (1 − rate), for the kept probabilities
};

// One flash-attention call (backend/attention.hpp): `items` independent (sequence, head)
// pairs, each with q_len query rows and k_len key/value rows of dh values, head-major
// ([items, len, dh]). A query's position in the whole sequence is q0 + i, a key's k0 + j;
// causal masking keeps the pairs with k0 + j <= q0 + i (so a block of a longer sequence,
// as context parallelism passes them around, masks by global positions).
// Grouped-query attention: `group` query items share each key/value item, so k and v hold
// kv_items() = items/group items and query item i reads kv item i mod kv_items() — the
// query items of kv item k are k, k + kv_items(), ...: the order heads_from_rows gives with
// parts = group + 2 on token rows holding, per kv head, its group's query blocks, k and v.
// With drop.key set, the probabilities are dropped as flash_dropout says.
struct flash_shape {
  std::size_t items = 0, group = 1, q_len = 0, k_len = 0, dh = 0;
  long long q0 = 0, k0 = 0;
  double scale = 1.0;
  bool causal = false;
  flash_dropout drop{};

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

  // Attention dropout: whether the call drops; query i of item `item`'s row key; the
  // feature of the item's key 0 (key j's is that + j); whether key j is kept in the row.
  STRATA_HD bool dropping() const { return drop.key != nullptr; }
  STRATA_HD std::uint64_t drop_row_key(std::uint64_t step_key, std::size_t item, std::size_t i) const {
    return dropout_row_key(step_key, drop.site, drop.sample0 + kv_item_of(item) / drop.heads,
                           static_cast<std::uint64_t>(q0) + i);
  }
  STRATA_HD std::uint64_t drop_feature0(std::size_t item) const {
    const std::uint64_t head = drop.head0 + (kv_item_of(item) % drop.heads) * group + item / kv_items();
    return head * drop.stride + static_cast<std::uint64_t>(k0);
  }
  STRATA_HD bool drop_keep(std::uint64_t row_key, std::uint64_t feature) const {
    return dropout_keep_in_row(row_key, feature, drop.threshold);
  }
};

// One dropout call (backend/elementwise.hpp): a rows × cols block of one micro-batch's
// activations and where it lies in the step, so that the mask (core/random.hpp) is drawn at
// global coordinates: local row r is the micro-batch's row m = row0 + r, i.e. sample
// sample0 + m / sample_rows of the step's global batch at position pos0 + m % sample_rows; local
// column c is feature col0 + c. `key` points at the step's key (dropout_step_key) in
// backend memory, so a recorded graph reads each step's own.
struct dropout_args {
  const std::uint64_t* key = nullptr;
  int site = 0;                       // the layer's index in the flat model
  std::uint64_t sample0 = 0;
  std::size_t row0 = 0, sample_rows = 1, col0 = 0;
  std::size_t pos0 = 0;               // Context<N>: the position of each local sample's first row
  std::uint64_t threshold = 0;        // dropped iff the hash lies below (dropout_threshold)
  double scale = 1.0;                 // 1 / (1 − rate), for the kept elements

  // The key of local row r (a kernel may divide m by sample_rows itself, in 32 bits, and
  // call row_key_at with the quotient and remainder).
  STRATA_HD std::uint64_t row_key(std::uint64_t step_key, std::size_t r) const {
    const std::size_t m = row0 + r;
    return row_key_at(step_key, m / sample_rows, m % sample_rows);
  }
  STRATA_HD std::uint64_t row_key_at(std::uint64_t step_key, std::size_t sample, std::size_t position) const {
    return dropout_row_key(step_key, site, sample0 + sample, pos0 + position);
  }
  STRATA_HD bool keep(std::uint64_t row_key, std::size_t c) const {
    return dropout_keep_in_row(row_key, col0 + c, threshold);
  }
};

}  // namespace strata::backend
