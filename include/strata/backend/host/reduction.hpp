#pragma once
// strata host backend, reductions: the host implementation of backend/reduction.hpp
// (whole-tensor sums in fixed chunks combined in order, the NaN/Inf scan, column sums).
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
#include "strata/backend/reduction.hpp"
#include "strata/core/finite.hpp"

namespace strata::backend::host {

namespace detail {

// Fixed-chunk reduction: chunk sums in 8 interleaved double lanes (lets the
// compiler vectorise without reassociating), chunks combined in order.
template <class T, class Op>
double reduce(queue& q, std::size_t n, const T* x, Op op) {
  if (n == 0) return 0.0;
  const std::size_t chunks = (n + reduce_chunk - 1) / reduce_chunk;
  std::vector<double> part(chunks);
  const std::size_t per_task = std::max<std::size_t>(1, grain / reduce_chunk);
  for_range(q, chunks, per_task, [&](std::size_t cb, std::size_t ce) {
    for (std::size_t c = cb; c < ce; ++c) {
      const std::size_t b = c * reduce_chunk, e = std::min(n, b + reduce_chunk);
      double lane[8] = {};
      std::size_t i = b;
      for (; i + 8 <= e; i += 8)
        for (std::size_t l = 0; l < 8; ++l) lane[l] += op(double(x[i + l]));
      for (; i < e; ++i) lane[0] += op(double(x[i]));
      part[c] = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    }
  });
  double s = 0;
  for (double p : part) s += p;
  return s;
}
}  // namespace detail

// Static members on arguments the front has checked (impl::reduction_kernels<queue>).
struct reduction_kernels {
  template <class T>
  static double sum(queue& q, std::size_t n, const T* x) {
    return detail::reduce(q, n, x, [](double v) { return v; });
  }

  template <class T>
  static double sum_squares(queue& q, std::size_t n, const T* x) {
    return detail::reduce(q, n, x, [](double v) { return v * v; });
  }

  template <class T>
  static bool all_finite(queue& q, std::size_t n, const T* x) {
    return all_finite_bits(n, x, [&](std::size_t tasks, auto&& f) { q.parallel_for(tasks, f); });
  }

  // Each task owns a block of columns and walks all rows in order: deterministic sums.
  template <class T, class G>
  static void bias_grad(queue& q, std::size_t rows, std::size_t cols, const T* dy, G* dbias, bool accumulate) {
    const std::size_t blocks = (cols + detail::col_block - 1) / detail::col_block;
    q.parallel_for(blocks, [&](std::size_t blk) {
      const std::size_t c0 = blk * detail::col_block, nc = std::min(detail::col_block, cols - c0);
      double acc[detail::col_block];
      for (std::size_t j = 0; j < nc; ++j) acc[j] = accumulate ? double(dbias[c0 + j]) : 0.0;
      for (std::size_t r = 0; r < rows; ++r) {
        const T* d = dy + r * cols + c0;
        for (std::size_t j = 0; j < nc; ++j) acc[j] += double(d[j]);
      }
      for (std::size_t j = 0; j < nc; ++j) dbias[c0 + j] = G(acc[j]);
    });
  }
};

}  // namespace strata::backend::host

namespace strata::backend::impl {
template <>
struct reduction_kernels<host::queue> : host::reduction_kernels {};
}  // namespace strata::backend::impl

namespace strata::backend::host {
// all_finite without a queue: host memory checked on one thread.
template <class T>
bool all_finite(std::size_t n, const T* x) {
  queue q(1);
  return all_finite(q, n, x);
}
using kernels::all_finite;  // the front's queue form, also as host::all_finite(q, ...)
}  // namespace strata::backend::host
