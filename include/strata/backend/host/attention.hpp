#pragma once
// strata host backend, attention: the head permutations around the batched GEMMs and
// the scaled, optionally causal, softmax of the score matrices, forward and backward.
// The GEMMs themselves are gemm_strided_batched (gemm.hpp): one batch item per
// (sequence, head), head-major operands.
//
// Layouts. Token rows are [seqs, seq, heads, parts, dh] (the QKV projection's output:
// per head its q, k, v blocks of dh, heads consecutive), and head-major tensors are
// [parts][seqs, heads, seq, dh], part p at offset p·seqs·heads·seq·dh.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>

#include "strata/backend/host/launch.hpp"

namespace strata::backend::host {

namespace detail {
inline void check_attention(const char* kernel, std::size_t seq, std::size_t heads, std::size_t parts,
                            std::size_t dh) {
  need(seq > 0 && heads > 0 && parts > 0 && dh > 0, kernel, "seq, heads, parts and dh must be positive");
}
}  // namespace detail

// out[p][s, h, t, :] = rows[s, t, h, p, :] for every sequence s < seqs, position t < seq,
// head h < heads, part p < parts. out must not overlap rows.
template <class T>
void heads_from_rows(queue& q, std::size_t seqs, std::size_t seq, std::size_t heads, std::size_t parts,
                     std::size_t dh, const T* rows, T* out) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (seqs == 0) return;
  detail::check_attention("heads_from_rows", seq, heads, parts, dh);
  detail::need(rows && out, "heads_from_rows", "null pointer");
  const std::size_t part = seqs * heads * seq * dh, row = heads * parts * dh;
  q.parallel_for(seqs * heads, [&](std::size_t sh) {
    const std::size_t s = sh / heads, h = sh % heads;
    for (std::size_t p = 0; p < parts; ++p)
      for (std::size_t t = 0; t < seq; ++t) {
        const T* src = rows + (s * seq + t) * row + (h * parts + p) * dh;
        std::copy(src, src + dh, out + p * part + (sh * seq + t) * dh);
      }
  });
}

// The inverse permutation: rows[s, t, h, p, :] = heads[p][s, h, t, :].
template <class T>
void rows_from_heads(queue& q, std::size_t seqs, std::size_t seq, std::size_t heads, std::size_t parts,
                     std::size_t dh, const T* in, T* rows) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (seqs == 0) return;
  detail::check_attention("rows_from_heads", seq, heads, parts, dh);
  detail::need(in && rows, "rows_from_heads", "null pointer");
  const std::size_t part = seqs * heads * seq * dh, row = heads * parts * dh;
  q.parallel_for(seqs * seq, [&](std::size_t st) {
    const std::size_t s = st / seq, t = st % seq;
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t p = 0; p < parts; ++p) {
        const T* src = in + p * part + ((s * heads + h) * seq + t) * dh;
        std::copy(src, src + dh, rows + st * row + (h * parts + p) * dh);
      }
  });
}

// For each of `batch` seq × seq score matrices, row by row:
//   p[i, j] = exp(scale·s[i, j] − m_i) / Σ_k exp(scale·s[i, k] − m_i)   over j (≤ i if causal),
//   p[i, j] = 0 for j > i when causal.
// Computed in compute_t<T> with a double denominator; p may alias s.
template <class T>
void attention_softmax_forward(queue& q, std::size_t batch, std::size_t seq, double scale, bool causal, const T* s,
                               T* p) {
  static_assert(detail::is_elem_v<T>);
  using C = detail::compute_t<T>;
  if (batch == 0 || seq == 0) return;
  detail::need(s && p, "attention_softmax_forward", "null pointer");
  const C a = C(scale);
  detail::for_rows(q, batch * seq, seq, [&](std::size_t r) {
    const std::size_t i = r % seq, n = causal ? i + 1 : seq;
    const T* x = s + r * seq;
    T* y = p + r * seq;
    C m = -std::numeric_limits<C>::infinity();
    for (std::size_t j = 0; j < n; ++j) m = std::max(m, a * C(x[j]));
    double sum = 0;
    for (std::size_t j = 0; j < n; ++j) sum += double(std::exp(a * C(x[j]) - m));
    const C inv = C(1.0 / sum);
    for (std::size_t j = 0; j < n; ++j) y[j] = T(std::exp(a * C(x[j]) - m) * inv);
    for (std::size_t j = n; j < seq; ++j) y[j] = T(C(0));
  });
}

// The gradient of the raw scores from the probabilities' gradient:
//   ds[i, j] = scale · p[i, j] · (dp[i, j] − Σ_k p[i, k]·dp[i, k])
// (zero where p is, above the diagonal of a causal matrix). ds may alias dp.
template <class T>
void attention_softmax_backward(queue& q, std::size_t batch, std::size_t seq, double scale, const T* p, const T* dp,
                                T* ds) {
  static_assert(detail::is_elem_v<T>);
  using C = detail::compute_t<T>;
  if (batch == 0 || seq == 0) return;
  detail::need(p && dp && ds, "attention_softmax_backward", "null pointer");
  detail::for_rows(q, batch * seq, seq, [&](std::size_t r) {
    const T* pr = p + r * seq;
    const T* g = dp + r * seq;
    T* o = ds + r * seq;
    double dot = 0;
    for (std::size_t j = 0; j < seq; ++j) dot += double(C(pr[j])) * double(C(g[j]));
    const C d = C(dot), a = C(scale);
    for (std::size_t j = 0; j < seq; ++j) o[j] = T(a * C(pr[j]) * (C(g[j]) - d));
  });
}

}  // namespace strata::backend::host
