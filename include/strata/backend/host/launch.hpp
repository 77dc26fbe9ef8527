#pragma once
// strata host backend: how kernels split work over the queue's threads (grain sizes,
// row and column blocking), and what every host kernel family guarantees beyond the
// fronts' conventions (backend/dispatch.hpp):
//
// Numerics: elementwise work runs in T. Long reductions (sums over rows or a
// whole tensor, layernorm statistics, softmax denominators) accumulate in
// double even for float data: this backend is the accuracy reference, and the
// cost is small next to memory traffic once a sum runs in independent partial
// sums that vectorize (layernorm's float rows: one running double sum was 2.5x
// slower at 64 features). GEMM accumulates in T (see gemm.hpp), like cuBLAS
// without split-K.
//
// Determinism: every output element is computed by one task with a fixed
// operation order; whole-tensor reductions sum fixed-size chunks and combine
// the chunk results in index order. Results therefore do not depend on the
// thread count (under IEEE-conforming flags: -ffast-math lets the compiler
// reassociate differently per call site and voids this).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "strata/backend/dispatch.hpp"
#include "strata/backend/host/host.hpp"
#include "strata/core/kernel_args.hpp"
#include "strata/core/precision.hpp"

// Dispatch on what the CPU has: a hot float loop marked STRATA_HOST_CLONES is compiled
// for x86-64-v4 (AVX-512), x86-64-v3 (AVX2, FMA) and the baseline, and the loader picks
// one per process (GCC's target_clones). Elementwise results are the same in every
// clone up to FMA contraction, which the compiler may apply in the v3/v4 ones. Not with
// clang 14 (its clones of inline functions collide at link time) nor nvcc's host pass;
// STRATA_NO_CPU_DISPATCH turns it off.
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__) && defined(__x86_64__) && \
    !defined(STRATA_NO_CPU_DISPATCH)
#define STRATA_HOST_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define STRATA_HOST_CLONES
#endif

namespace strata::backend::host {

namespace detail {

using backend::detail::bad_label;
using backend::detail::compute_t;
using backend::detail::fail;
using backend::detail::is_elem_v;
using backend::detail::is_real_v;
using backend::detail::need;

// Elements per task for streaming kernels: large enough that scheduling
// (~microseconds) is noise, small enough to split mid-sized tensors.
inline constexpr std::size_t grain = std::size_t(1) << 15;
// Fixed chunk for whole-tensor reductions. Part of the result's definition
// (it fixes the summation order), so it must not depend on the thread count.
inline constexpr std::size_t reduce_chunk = std::size_t(1) << 14;

// f(begin, end) over [0, n) in grain-sized pieces on q's threads.
template <class F>
void for_range(queue& q, std::size_t n, std::size_t g, F&& f) {
  if (n == 0) return;
  g = std::max<std::size_t>(g, 1);
  const std::size_t tasks = (n + g - 1) / g;
  if (tasks == 1) return f(std::size_t(0), n);
  q.parallel_for(tasks, [&](std::size_t t) { f(t * g, std::min(n, (t + 1) * g)); });
}

// f(r) for every row r of a rows x cols problem, batching rows per task.
template <class F>
void for_rows(queue& q, std::size_t rows, std::size_t cols, F&& f) {
  const std::size_t per = std::max<std::size_t>(1, grain / std::max<std::size_t>(cols, 1));
  for_range(q, rows, per, [&](std::size_t b, std::size_t e) {
    for (std::size_t r = b; r < e; ++r) f(r);
  });
}

// Column blocks for column reductions (bias/gamma gradients): each task owns
// a block of columns and walks all rows in order -> deterministic sums.
inline constexpr std::size_t col_block = 256;

// Throws std::out_of_range naming the first label outside [lo, hi) (before any output is
// written: the host reports labels at once, see backend/softmax.hpp); `skip` (a loss's
// ignore_label) is allowed.
inline void check_labels(const char* kernel, const std::int32_t* labels, std::size_t rows, std::int64_t lo,
                         std::int64_t hi, std::int64_t skip = INT64_MIN) {
  for (std::size_t r = 0; r < rows; ++r) {
    const std::int64_t l = labels[r];
    if ((l < lo || l >= hi) && l != skip) throw bad_label(kernel, l, r, lo, hi);
  }
}

}  // namespace detail

}  // namespace strata::backend::host
