#pragma once
// The attention kernel family's front (dispatch.hpp): the head permutations; the scaled,
// optionally causal, softmax of score matrices, forward and backward (for attention
// written as batched GEMMs, gemm.hpp's gemm_strided_batched, one item per (sequence,
// head)); and flash attention, forward and backward, which never forms a score matrix.
// Implementations: host/attention.hpp, cuda/attention.cuh.
//
// Layouts. Token rows are [seqs, seq, heads, parts, dh] (the QKV projection's output:
// per head its q, k, v blocks of dh, heads consecutive), and head-major tensors are
// [parts][seqs, heads, seq, dh], part p at offset p·seqs·heads·seq·dh.
#include <cstddef>
#include <type_traits>

#include "strata/backend/dispatch.hpp"
#include "strata/core/kernel_args.hpp"

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
// Every query row must see at least one key: under causal masking no query may precede
// the first key.
inline void check_flash(const char* kernel, const flash_shape& f) {
  need(f.q_len > 0 && f.k_len > 0 && f.dh > 0, kernel, "q_len, k_len and dh must be positive");
  need(f.group > 0 && f.items % f.group == 0, kernel, "group must be positive and divide items");
  need(f.q0 >= 0 && f.k0 >= 0, kernel, "positions must be >= 0");
  need(!f.causal || f.q0 >= f.k0, kernel, "a causal query block before its key block leaves rows with no key");
  need(!f.dropping() || (f.drop.heads > 0 && f.kv_items() % f.drop.heads == 0), kernel,
       "dropout's kv heads per sequence must divide the kv items");
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

// Rotary position embedding (RoFormer; transformers' Llama convention), in place on
// head-major x [items, seq, dh], dh even: with h = dh/2, the pair (x_i, x_{i+h}) of the row
// at position p = pos0 + t (t its place in the item) is rotated by θ = p · base^(−2i/dh),
//   x_i ← x_i cos θ − x_{i+h} sin θ,   x_{i+h} ← x_{i+h} cos θ + x_i sin θ
// (core/math.hpp's rope_rotate, in double), or by −θ with `inverse` — the rotation's
// transpose, which is its backward.
template <class T, kernel_queue Q>
void rotary_embedding(Q& q, std::size_t items, std::size_t seq, std::size_t dh, long long pos0, double base,
                      bool inverse, T* x) {
  static_assert(detail::is_elem_v<T>);
  if (items == 0) return;
  detail::need(seq > 0 && dh > 0 && dh % 2 == 0, "rotary_embedding", "seq must be positive and dh even");
  detail::need(pos0 >= 0 && base > 1.0, "rotary_embedding", "positions must be >= 0 and the base > 1");
  detail::need(x != nullptr, "rotary_embedding", "null pointer");
  impl::attention_kernels<Q>::rotary_embedding(q, items, seq, dh, pos0, base, inverse, x);
}

// Flash attention (Dao et al.), forward: for each item and query row i,
//   s_ij = scale · q_i·k_j over the unmasked keys j, lse_i = log Σ_j exp(s_ij),
//   o_i = Σ_j exp(s_ij − lse_i) · v_j,
// k and v those of the item's kv item (flash_shape::kv_item_of: itself unless group > 1),
// computed over tiles of queries × keys with an online softmax, so memory is the inputs,
// o and one statistic per row (lse, in L = stat_t<T>); sums in compute_t<T> (float for
// 16-bit T), o rounded once. Causal tiles wholly above the diagonal are skipped.
// Attention dropout (f.drop, core/kernel_args.hpp): o_i = Σ_j z_ij v_j with z_ij = p_ij ·
// 1/(1 − rate) where the mask keeps (i, j), else 0 — the mask recomputed from the element's
// coordinates, nothing stored; lse stays that of the undropped p (dropout follows the softmax).
template <class T, class L, kernel_queue Q>
void flash_attention_forward(Q& q, const flash_shape& f, const T* qh, const T* kh, const T* vh, T* o, L* lse) {
  static_assert(detail::is_elem_v<T> && std::is_floating_point_v<L>);
  if (f.items == 0) return;
  detail::check_flash("flash_attention_forward", f);
  detail::need(qh && kh && vh && o && lse, "flash_attention_forward", "null pointer");
  impl::attention_kernels<Q>::flash_attention_forward(q, f, qh, kh, vh, o, lse);
}

// Backward, recomputing each tile's probabilities p_ij = exp(s_ij − lse_i) from the
// forward's o and lse: with δ_i = do_i·o_i,
//   dv_j = Σ_i p_ij do_i,  ds_ij = p_ij (do_i·v_j − δ_i),
//   dq_i = scale Σ_j ds_ij k_j,  dk_j = scale Σ_i ds_ij q_i,
// a kv item's dk and dv summed over the query rows of every item of its group (dk and dv,
// like k and v, hold items/group items). dq, dk and dv are written, not accumulated (one kv
// item's rows by one worker: the sums are in a fixed order, so the result is deterministic).
// With dropout the forward's mask m_ij (1/(1 − rate) kept, 0 dropped) is drawn again:
//   dv_j = Σ_i m_ij p_ij do_i,  ds_ij = p_ij (m_ij do_i·v_j − δ_i),
// δ_i = do_i·o_i still being Σ_j p_ij m_ij do_i·v_j, as o_i = Σ_j m_ij p_ij v_j.
template <class T, class L, kernel_queue Q>
void flash_attention_backward(Q& q, const flash_shape& f, const T* qh, const T* kh, const T* vh, const T* o,
                              const T* dout, const L* lse, T* dq, T* dk, T* dv) {
  static_assert(detail::is_elem_v<T> && std::is_floating_point_v<L>);
  if (f.items == 0) return;
  detail::check_flash("flash_attention_backward", f);
  detail::need(qh && kh && vh && o && dout && lse && dq && dk && dv, "flash_attention_backward", "null pointer");
  impl::attention_kernels<Q>::flash_attention_backward(q, f, qh, kh, vh, o, dout, lse, dq, dk, dv);
}

// Merges a partial attention over other keys into (o, lse), row by row (a ring's steps of
// context-parallel attention): for each of `rows` rows of dh values,
//   lse ← log(e^lse + e^lse_b),   o ← e^(lse_old − lse)·o + e^(lse_b − lse)·o_b
// (core/math.hpp's lse_merge, in compute_t<T> or L if wider, o rounded once). A side whose
// lse is −inf (no key seen) weighs 0: its o must be finite (0, say).
template <class T, class L, kernel_queue Q>
void attention_merge(Q& q, std::size_t rows, std::size_t dh, T* o, L* lse, const T* o_b, const L* lse_b) {
  static_assert(detail::is_elem_v<T> && std::is_floating_point_v<L>);
  if (rows == 0) return;
  detail::need(dh > 0, "attention_merge", "dh must be positive");
  detail::need(o && lse && o_b && lse_b, "attention_merge", "null pointer");
  impl::attention_kernels<Q>::attention_merge(q, rows, dh, o, lse, o_b, lse_b);
}

}  // namespace kernels

}  // namespace strata::backend
