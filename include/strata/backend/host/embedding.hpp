#pragma once
// strata host backend, embeddings: the host implementation of backend/embedding.hpp (id
// checks, lookups, the gradient's scatter-add in row order, learned positions).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/backend/embedding.hpp"
#include "strata/backend/host/launch.hpp"

namespace strata::backend::host {

// Static members on arguments the front has checked (impl::embedding_kernels<queue>).
struct embedding_kernels {
  static void check_ids(queue&, const std::int32_t* ids, std::size_t n, std::size_t vocab) {
    backend::detail::check_host_ids(ids, n, vocab);
  }

  template <class T>
  static void embedding_forward(queue& q, std::size_t rows, std::size_t D, const std::int32_t* ids, const T* table,
                                std::size_t vocab_offset, std::size_t vocab_local, T* out) {
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

  // Tasks own column blocks and walk rows in order, so repeated ids are summed in the
  // same order for any thread count.
  template <class T, class G>
  static void embedding_backward(queue& q, std::size_t rows, std::size_t D, const std::int32_t* ids, const T* dout,
                                 std::size_t vocab_offset, std::size_t vocab_local, G* dtable, bool accumulate) {
    detail::check_labels("embedding_backward", ids, rows, 0, std::numeric_limits<std::int32_t>::max());
    if (!accumulate)
      detail::for_range(q, vocab_local * D, detail::grain,
                        [&](std::size_t b, std::size_t e) { std::fill(dtable + b, dtable + e, G(0)); });
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

  template <class T>
  static void position_forward(queue& q, std::size_t rows, std::size_t D, std::size_t seq, std::size_t row0,
                               const T* x, const T* pos, T* y) {
    using C = detail::compute_t<T>;
    detail::for_rows(q, rows, D, [&](std::size_t r) {
      const T* p = pos + ((row0 + r) % seq) * D;
      for (std::size_t j = 0; j < D; ++j) y[r * D + j] = T(C(x[r * D + j]) + C(p[j]));
    });
  }

  template <class T, class G>
  static void position_backward(queue& q, std::size_t rows, std::size_t D, std::size_t seq, std::size_t row0,
                                const T* dy, G* dpos, bool accumulate) {
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

  static void segment_ids(queue& q, std::size_t samples, std::size_t seq, const std::int32_t* ids,
                          std::int32_t sep, std::int32_t last, std::int32_t* types) {
    detail::for_rows(q, samples, seq, [&](std::size_t s) {
      std::int32_t t = 0;
      for (std::size_t j = s * seq; j < (s + 1) * seq; ++j) {
        types[j] = t;
        if (ids[j] == sep && t < last) ++t;
      }
    });
  }
};

}  // namespace strata::backend::host

namespace strata::backend::impl {
template <>
struct embedding_kernels<host::queue> : host::embedding_kernels {};
}  // namespace strata::backend::impl

namespace strata::backend::host {
// check_ids without a queue: host-side validation of ids in host memory.
inline void check_ids(const std::int32_t* ids, std::size_t n, std::size_t vocab) {
  queue q(1);
  check_ids(q, ids, n, vocab);
}
using kernels::check_ids;  // the front's queue form, also as host::check_ids(q, ...)
}  // namespace strata::backend::host
