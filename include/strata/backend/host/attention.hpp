#pragma once
// strata host backend, attention: the host implementation of backend/attention.hpp (the
// head permutations, one pool task per (sequence, head) or (sequence, position), and the
// score softmaxes, rows batched per pool task).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>

#include "strata/backend/attention.hpp"
#include "strata/backend/host/launch.hpp"

namespace strata::backend::host {

// Static members on arguments the front has checked (impl::attention_kernels<queue>).
struct attention_kernels {
  template <class T>
  static void heads_from_rows(queue& q, std::size_t seqs, std::size_t seq, std::size_t heads, std::size_t parts,
                              std::size_t dh, const T* rows, T* out) {
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

  template <class T>
  static void rows_from_heads(queue& q, std::size_t seqs, std::size_t seq, std::size_t heads, std::size_t parts,
                              std::size_t dh, const T* in, T* rows) {
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

  template <class T>
  static void attention_softmax_forward(queue& q, std::size_t batch, std::size_t seq, double scale, bool causal,
                                        const T* s, T* p) {
    using C = detail::compute_t<T>;
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

  template <class T>
  static void attention_softmax_backward(queue& q, std::size_t batch, std::size_t seq, double scale, const T* p,
                                         const T* dp, T* ds) {
    using C = detail::compute_t<T>;
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
};

}  // namespace strata::backend::host

namespace strata::backend::impl {
template <>
struct attention_kernels<host::queue> : host::attention_kernels {};
}  // namespace strata::backend::impl
