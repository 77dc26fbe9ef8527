#pragma once
// The attention kernel family's front (dispatch.hpp): the head permutations around the
// batched GEMMs and the scaled, optionally causal, softmax of the score matrices, forward
// and backward. The GEMMs themselves are gemm_strided_batched (gemm.hpp): one batch item
// per (sequence, head), head-major operands. Implementations: host/attention.hpp,
// cuda/attention.cuh.
//
// Layouts. Token rows are [seqs, seq, heads, parts, dh] (the QKV projection's output:
// per head its q, k, v blocks of dh, heads consecutive), and head-major tensors are
// [parts][seqs, heads, seq, dh], part p at offset p·seqs·heads·seq·dh.
#include <cstddef>
#include <type_traits>

#include "strata/backend/dispatch.hpp"

namespace strata::backend {

namespace impl {
template <class Queue>
struct attention_kernels;
}  // namespace impl

namespace detail {
inline void check_attention(const char* kernel, std::size_t seq, std::size_t heads, std::size_t parts,
                            std::size_t dh) {
  need(seq > 0 && heads > 0 && parts > 0 && dh > 0, kernel, "seq, heads, parts and dh must be positive");
}
}  // namespace detail

inline namespace kernels {

// out[p][s, h, t, :] = rows[s, t, h, p, :] for every sequence s < seqs, position t < seq,
// head h < heads, part p < parts. out must not overlap rows. Any trivially copyable T.
template <class T, kernel_queue Q>
void heads_from_rows(Q& q, std::size_t seqs, std::size_t seq, std::size_t heads, std::size_t parts, std::size_t dh,
                     const T* rows, T* out) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (seqs == 0) return;
  detail::check_attention("heads_from_rows", seq, heads, parts, dh);
  detail::need(rows && out, "heads_from_rows", "null pointer");
  impl::attention_kernels<Q>::heads_from_rows(q, seqs, seq, heads, parts, dh, rows, out);
}

// The inverse permutation: rows[s, t, h, p, :] = heads[p][s, h, t, :].
template <class T, kernel_queue Q>
void rows_from_heads(Q& q, std::size_t seqs, std::size_t seq, std::size_t heads, std::size_t parts, std::size_t dh,
                     const T* in, T* rows) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (seqs == 0) return;
  detail::check_attention("rows_from_heads", seq, heads, parts, dh);
  detail::need(in && rows, "rows_from_heads", "null pointer");
  impl::attention_kernels<Q>::rows_from_heads(q, seqs, seq, heads, parts, dh, in, rows);
}

// For each of `batch` seq × seq score matrices, row by row:
//   p[i, j] = exp(scale·s[i, j] − m_i) / Σ_k exp(scale·s[i, k] − m_i)   over j (≤ i if causal),
//   p[i, j] = 0 for j > i when causal.
// Computed in compute_t<T> (scale rounded to it) with a double denominator; p may alias s.
template <class T, kernel_queue Q>
void attention_softmax_forward(Q& q, std::size_t batch, std::size_t seq, double scale, bool causal, const T* s,
                               T* p) {
  static_assert(detail::is_elem_v<T>);
  if (batch == 0 || seq == 0) return;
  detail::need(s && p, "attention_softmax_forward", "null pointer");
  impl::attention_kernels<Q>::attention_softmax_forward(q, batch, seq, scale, causal, s, p);
}

// The gradient of the raw scores from the probabilities' gradient:
//   ds[i, j] = scale · p[i, j] · (dp[i, j] − Σ_k p[i, k]·dp[i, k])
// (zero where p is, above the diagonal of a causal matrix), the dot in double. ds may
// alias dp.
template <class T, kernel_queue Q>
void attention_softmax_backward(Q& q, std::size_t batch, std::size_t seq, double scale, const T* p, const T* dp,
                                T* ds) {
  static_assert(detail::is_elem_v<T>);
  if (batch == 0 || seq == 0) return;
  detail::need(p && dp && ds, "attention_softmax_backward", "null pointer");
  impl::attention_kernels<Q>::attention_softmax_backward(q, batch, seq, scale, p, dp, ds);
}

}  // namespace kernels

}  // namespace strata::backend
