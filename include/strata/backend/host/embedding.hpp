#pragma once
// strata host backend, embeddings: id checks, lookups and the gradient's scatter-add
// (optionally vocabulary-parallel).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/backend/host/launch.hpp"

namespace strata::backend::host {

// ---------------------------------------------------------------------------
// Embedding (optionally vocabulary-parallel)
// ---------------------------------------------------------------------------

// Throws std::out_of_range naming the first id outside [0, vocab) and its
// position. Host-side validation of token ids / labels before a step.
inline void check_ids(const std::int32_t* ids, std::size_t n, std::size_t vocab) {
  if (n && !ids) throw std::invalid_argument("strata: check_ids: null ids");
  for (std::size_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || std::size_t(ids[i]) >= vocab)
      throw std::out_of_range("strata: token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                              " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  }
}
inline void check_ids(queue&, const std::int32_t* ids, std::size_t n, std::size_t vocab) { check_ids(ids, n, vocab); }

// out[r, :] = table[ids[r] - vocab_offset, :] if ids[r] is in this rank's
// slice [vocab_offset, vocab_offset + vocab_local), else 0: summing the
// outputs of all slices gives the full lookup. table is vocab_local x D.
// Negative ids throw std::out_of_range; ids >= the full vocabulary cannot be
// seen here (they look like another rank's), so validate with check_ids.
template <class T>
void embedding_forward(queue& q, std::size_t rows, std::size_t D, const std::int32_t* ids, const T* table,
                       std::size_t vocab_offset, std::size_t vocab_local, T* out) {
  static_assert(detail::is_elem_v<T>);
  if (rows * D == 0) return;
  detail::need(ids && out && (table || vocab_local == 0), "embedding_forward", "null pointer");
  detail::check_labels("embedding_forward", ids, rows, 0, std::numeric_limits<std::int32_t>::max());
  detail::for_rows(q, rows, D, [&](std::size_t r) {
    const std::size_t id = std::size_t(ids[r]);
    T* o = out + r * D;
    if (id >= vocab_offset && id - vocab_offset < vocab_local) {
      const T* src = table + (id - vocab_offset) * D;
      for (std::size_t j = 0; j < D; ++j) o[j] = src[j];
    } else {
      for (std::size_t j = 0; j < D; ++j) o[j] = T(0.0f);
    }
  });
}

// dtable[ids[r] - vocab_offset, :] += dout[r, :] for ids in this slice, in
// row order (deterministic; accumulation in G as rows are added one by one).
// accumulate == false zeroes the vocab_local x D table first.
template <class T, class G = T>
void embedding_backward(queue& q, std::size_t rows, std::size_t D, const std::int32_t* ids, const T* dout,
                        std::size_t vocab_offset, std::size_t vocab_local, G* dtable, bool accumulate) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<G>);
  if (D == 0 || vocab_local == 0) return;
  detail::need(dtable && (rows == 0 || (ids && dout)), "embedding_backward", "null pointer");
  detail::check_labels("embedding_backward", ids, rows, 0, std::numeric_limits<std::int32_t>::max());
  if (!accumulate)
    detail::for_range(q, vocab_local * D, detail::grain,
                      [&](std::size_t b, std::size_t e) { std::fill(dtable + b, dtable + e, G(0)); });
  // Tasks own column blocks and walk rows in order, so repeated ids are
  // summed in the same order for any thread count.
  const std::size_t blocks = (D + detail::col_block - 1) / detail::col_block;
  q.parallel_for(blocks, [&](std::size_t blk) {
    const std::size_t c0 = blk * detail::col_block, nc = std::min(detail::col_block, D - c0);
    for (std::size_t r = 0; r < rows; ++r) {
      const std::size_t id = std::size_t(ids[r]);
      if (id < vocab_offset || id - vocab_offset >= vocab_local) continue;
      G* d = dtable + (id - vocab_offset) * D + c0;
      const T* g = dout + r * D + c0;
      for (std::size_t j = 0; j < nc; ++j) d[j] += G(g[j]);
    }
  });
}

// Learned positions: y[r, :] = x[r, :] + pos[(row0 + r) mod seq, :] for rows of
// `seq`-token sequences, of which this device holds rows from `row0` on (a row split
// keeps whole rows in order). y may alias x. Computed in compute_t<T>.
template <class T>
void position_forward(queue& q, std::size_t rows, std::size_t D, std::size_t seq, std::size_t row0, const T* x,
                      const T* pos, T* y) {
  static_assert(detail::is_elem_v<T>);
  using C = detail::compute_t<T>;
  if (rows == 0 || D == 0) return;
  detail::need(seq > 0, "position_forward", "seq must be positive");
  detail::need(x && pos && y, "position_forward", "null pointer");
  detail::for_rows(q, rows, D, [&](std::size_t r) {
    const T* p = pos + ((row0 + r) % seq) * D;
    for (std::size_t j = 0; j < D; ++j) y[r * D + j] = T(C(x[r * D + j]) + C(p[j]));
  });
}

// dpos[t, :] (+)= Σ over this device's rows r with (row0 + r) mod seq == t of dy[r, :],
// in row order with double accumulation (deterministic). accumulate == false zeroes
// the seq x D gradient first.
template <class T, class G = T>
void position_backward(queue& q, std::size_t rows, std::size_t D, std::size_t seq, std::size_t row0, const T* dy,
                       G* dpos, bool accumulate) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<G>);
  if (D == 0 || seq == 0) return;
  detail::need(dpos && (rows == 0 || dy), "position_backward", "null pointer");
  q.parallel_for(seq, [&](std::size_t t) {
    thread_local std::vector<double> acc;
    acc.assign(D, 0.0);
    G* d = dpos + t * D;
    if (accumulate)
      for (std::size_t j = 0; j < D; ++j) acc[j] = double(d[j]);
    const std::size_t first = (t + seq - row0 % seq) % seq;  // the first local row at position t
    for (std::size_t r = first; r < rows; r += seq)
      for (std::size_t j = 0; j < D; ++j) acc[j] += double(dy[r * D + j]);
    for (std::size_t j = 0; j < D; ++j) d[j] = G(acc[j]);
  });
}

}  // namespace strata::backend::host
