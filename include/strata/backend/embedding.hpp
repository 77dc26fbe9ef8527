#pragma once
// The embedding kernel family's front (dispatch.hpp): token-id checks, lookups and the
// gradient's deterministic scatter-add (optionally vocabulary-parallel), and learned
// positions, BERT's segment ids. Implementations: host/embedding.hpp, cuda/embedding.cuh.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "strata/backend/dispatch.hpp"

namespace strata::backend {

namespace impl {
template <class Queue>
struct embedding_kernels;
}  // namespace impl

namespace detail {
// check_ids' error: the first id outside [0, vocab) and its position.
[[noreturn]] inline void bad_id(std::int32_t id, std::size_t pos, std::size_t vocab) {
  throw std::out_of_range("strata: token id " + std::to_string(id) + " at position " + std::to_string(pos) +
                          " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
}
// check_ids on ids the CPU can read (every backend accepts host memory).
inline void check_host_ids(const std::int32_t* ids, std::size_t n, std::size_t vocab) {
  for (std::size_t i = 0; i < n; ++i)
    if (ids[i] < 0 || std::size_t(ids[i]) >= vocab) bad_id(ids[i], i, vocab);
}
}  // namespace detail

inline namespace kernels {

// Throws std::out_of_range naming the first of ids[0, n) outside [0, vocab) and its
// position: validation of token ids and labels before a step. A device backend checks
// device memory with a kernel and reads the answer back (it SYNCHRONIZES q); ordinary host
// memory is accepted on every backend.
template <kernel_queue Q>
void check_ids(Q& q, const std::int32_t* ids, std::size_t n, std::size_t vocab) {
  if (n == 0) return;
  if (!ids) throw std::invalid_argument("strata: check_ids: null ids");
  impl::embedding_kernels<Q>::check_ids(q, ids, n, vocab);
}

// out[r, :] = table[ids[r] - vocab_offset, :] if ids[r] is in this rank's slice
// [vocab_offset, vocab_offset + vocab_local), else 0: summing the outputs of all slices
// gives the full lookup. table is vocab_local x D. Negative ids are out of range; ids >=
// the full vocabulary cannot be seen here (they look like another rank's), so validate
// with check_ids.
template <class T, kernel_queue Q>
void embedding_forward(Q& q, std::size_t rows, std::size_t D, const std::int32_t* ids, const T* table,
                       std::size_t vocab_offset, std::size_t vocab_local, T* out) {
  static_assert(detail::is_elem_v<T>);
  if (rows * D == 0) return;
  detail::need(ids && out && (table || vocab_local == 0), "embedding_forward", "null pointer");
  impl::embedding_kernels<Q>::embedding_forward(q, rows, D, ids, table, vocab_offset, vocab_local, out);
}

// dtable[ids[r] - vocab_offset, :] += dout[r, :] for ids in this slice, the rows of one id
// added in row order, one by one in G (deterministic, the same bits on every backend).
// accumulate == false zeroes the vocab_local x D table first. T: dout; G: dtable.
template <class T, class G = T, kernel_queue Q>
void embedding_backward(Q& q, std::size_t rows, std::size_t D, const std::int32_t* ids, const T* dout,
                        std::size_t vocab_offset, std::size_t vocab_local, G* dtable, bool accumulate) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<G>);
  if (D == 0 || vocab_local == 0) return;
  detail::need(dtable && (rows == 0 || (ids && dout)), "embedding_backward", "null pointer");
  impl::embedding_kernels<Q>::embedding_backward(q, rows, D, ids, dout, vocab_offset, vocab_local, dtable,
                                                 accumulate);
}

// Learned positions: y[r, :] = x[r, :] + pos[(row0 + r) mod seq, :] for rows of
// `seq`-token sequences, of which this device holds rows from `row0` on (a row split
// keeps whole rows in order). y may alias x. Computed in compute_t<T>.
template <class T, kernel_queue Q>
void position_forward(Q& q, std::size_t rows, std::size_t D, std::size_t seq, std::size_t row0, const T* x,
                      const T* pos, T* y) {
  static_assert(detail::is_elem_v<T>);
  if (rows == 0 || D == 0) return;
  detail::need(seq > 0, "position_forward", "seq must be positive");
  detail::need(x && pos && y, "position_forward", "null pointer");
  impl::embedding_kernels<Q>::position_forward(q, rows, D, seq, row0, x, pos, y);
}

// dpos[t, :] (+)= Σ over this device's rows r with (row0 + r) mod seq == t of dy[r, :],
// in row order with double accumulation (deterministic, the same bits on every backend).
// accumulate == false zeroes the seq x D gradient first. T: dy; G: dpos.
template <class T, class G = T, kernel_queue Q>
void position_backward(Q& q, std::size_t rows, std::size_t D, std::size_t seq, std::size_t row0, const T* dy,
                       G* dpos, bool accumulate) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<G>);
  if (D == 0 || seq == 0) return;
  detail::need(dpos && (rows == 0 || dy), "position_backward", "null pointer");
  impl::embedding_kernels<Q>::position_backward(q, rows, D, seq, row0, dy, dpos, accumulate);
}

// BERT's segments (token types): for each of `samples` sequences of `seq` ids,
// types[t] = the number of `sep` ids before position t, at most `last` (the separator
// itself belongs to the segment it closes: [CLS] a… [SEP] → 0, b… [SEP] → 1).
template <kernel_queue Q>
void segment_ids(Q& q, std::size_t samples, std::size_t seq, const std::int32_t* ids, std::int32_t sep,
                 std::int32_t last, std::int32_t* types) {
  if (samples * seq == 0) return;
  detail::need(ids && types, "segment_ids", "null pointer");
  detail::need(last >= 0, "segment_ids", "last must be >= 0");
  impl::embedding_kernels<Q>::segment_ids(q, samples, seq, ids, sep, last, types);
}

}  // namespace kernels

}  // namespace strata::backend
