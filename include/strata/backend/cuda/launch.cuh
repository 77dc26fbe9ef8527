// strata-header: cuda-only
#pragma once
// strata CUDA backend, launch configuration (CUB's split of tuning from agents): grid
// sizes for grid-stride loops, row-kernel shapes by row length, column-sum tiles and
// the multi-tensor optimizer's blocks. The kernels in the family headers take these
// as template arguments; tuning for a new architecture changes only this file.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "strata/backend/cuda/cuda.hpp"

namespace strata::backend::cuda {

namespace detail {

template <int V>
using ic = std::integral_constant<int, V>;

inline constexpr unsigned flat_threads = 256;
// Grid for a grid-stride loop over `items` work items: one full wave of
// resident blocks is enough to saturate memory; more only adds tail effect.
inline unsigned flat_grid(const queue& q, std::size_t items, unsigned threads = flat_threads) {
  const std::size_t want = (items + threads - 1) / threads;
  const std::size_t cap = std::size_t(q.sm_count()) * (2048 / threads);
  return static_cast<unsigned>(std::max<std::size_t>(1, std::min(want, cap)));
}


inline constexpr int colsum_tx = 32, colsum_ty = 8;
// Partials are capped at this many bytes so they always fit the default
// workspace; the chunking depends only on the shape (not the device).
inline constexpr std::size_t partial_budget = std::size_t(16) << 20;

struct chunking {
  std::size_t chunks, rows_per_chunk;
};
inline chunking column_chunks(std::size_t rows, std::size_t cols, std::size_t nout, std::size_t min_rows,
                              std::size_t max_chunks) {
  std::size_t R = std::max(min_rows, (rows + max_chunks - 1) / max_chunks);
  std::size_t chunks = (rows + R - 1) / R;
  const std::size_t cap = std::max<std::size_t>(1, partial_budget / (std::max<std::size_t>(cols, 1) * nout * 8));
  if (chunks > cap) {
    chunks = cap;
    R = (rows + chunks - 1) / chunks;
    chunks = (rows + R - 1) / R;
  }
  return {std::max<std::size_t>(chunks, 1), std::max<std::size_t>(R, 1)};
}

// Pass 1: block (32 x 8) owns 32 columns of one row chunk; each thread sums
// every 8th row in order, then the 8 row-lanes combine in order. With a
// single chunk the result goes straight to the outputs. T here is the
// OUTPUT (gradient) type, float or double; f reads the inputs, whatever
// their type, and adds doubles.

inline constexpr int multi_max_tensors = 64;
inline constexpr std::size_t multi_chunk = 16384;
inline constexpr unsigned multi_threads = 256;

// Row-kernel shapes by row length D: TH threads per row, IT values cached in
// registers per thread (0: re-read from memory, for rows too long to hold),
// RPB rows per block (blocks stay >= 256 threads for occupancy).
template <class F>
void with_row_config(std::size_t D, F&& f) {
  if (D <= 256)
    f(ic<32>{}, ic<8>{}, ic<8>{});
  else if (D <= 1024)
    f(ic<128>{}, ic<8>{}, ic<2>{});
  else if (D <= 4096)
    f(ic<512>{}, ic<8>{}, ic<1>{});
  else if (D <= 8192)
    f(ic<1024>{}, ic<8>{}, ic<1>{});
  else
    f(ic<1024>{}, ic<0>{}, ic<1>{});
}
// LayerNorm backward keeps two double accumulators per cached column when
// it fuses dgamma/dbeta, so it caches 4 values per thread (more threads per
// row) to stay near 64 registers; beyond 4096 columns it does not fuse.
template <class F>
void with_row_config_backward(std::size_t D, F&& f) {
  if (D <= 128)
    f(ic<32>{}, ic<4>{}, ic<8>{});
  else if (D <= 512)
    f(ic<128>{}, ic<4>{}, ic<2>{});
  else if (D <= 1024)  // H100, D = 1024: 512 threads on one row left each 2 loads in flight
    f(ic<256>{}, ic<4>{}, ic<2>{});
  else if (D <= 2048)
    f(ic<512>{}, ic<4>{}, ic<1>{});
  else if (D <= 4096)
    f(ic<1024>{}, ic<4>{}, ic<1>{});
  else if (D <= 8192)
    f(ic<1024>{}, ic<8>{}, ic<1>{});
  else
    f(ic<1024>{}, ic<0>{}, ic<1>{});
}
// Single-pass row kernels need no cache.
template <class F>
void with_row_threads(std::size_t D, F&& f) {
  if (D <= 256)
    f(ic<32>{}, ic<8>{});
  else if (D <= 2048)
    f(ic<128>{}, ic<2>{});
  else
    f(ic<512>{}, ic<1>{});
}

}  // namespace detail

}  // namespace strata::backend::cuda
