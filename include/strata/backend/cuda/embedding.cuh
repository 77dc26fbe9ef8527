// strata-header: cuda-only
#pragma once
// strata CUDA backend, embeddings: the CUDA implementation of backend/embedding.hpp (id
// checks, lookups, the gradient's deterministic scatter-add through a stable CUB sort of
// (id, row), learned positions).
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

#include <cub/device/device_radix_sort.cuh>

#include "strata/backend/cuda/device.cuh"
#include "strata/backend/embedding.hpp"

namespace strata::backend::cuda {

// ---------------------------------------------------------------------------
// Ids and embeddings
// ---------------------------------------------------------------------------

namespace detail {

template <class I>
__global__ void k_check_ids(std::size_t n, const I* ids, std::size_t vocab, unsigned long long* first_bad) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const I v = ids[i];
    if (v < 0 || static_cast<std::size_t>(v) >= vocab) atomicMin(first_bad, static_cast<unsigned long long>(i));
  }
}

template <class T, int W>
__global__ void k_embedding_forward(std::size_t rows, std::size_t D, const std::int32_t* ids, const T* table,
                                    std::size_t vocab_offset, std::size_t vocab_local, T* out, device_status* st) {
  const bool small = rows * D <= 0xffffffffull;
  flat_loop<W>(rows * D, [&](std::size_t i, auto w) {
    constexpr int V = decltype(w)::value;
    const std::size_t r = d_div(i, D, small), j = i - r * D;
    const std::int32_t id = ids[r];
    T o[V];
    if (id < 0) {
#pragma unroll
      for (int k = 0; k < V; ++k) o[k] = d_nan<T>();
      if (j == 0) report_label(st, kc_embedding_forward, r, id, 0, INT32_MAX);
    } else if (std::size_t(id) >= vocab_offset && std::size_t(id) - vocab_offset < vocab_local) {
      load<V>(table + (std::size_t(id) - vocab_offset) * D + j, o);
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) o[k] = d_zero<T>();
    }
    store<V>(out + i, o);
  });
}

// Sort keys: the row's table index within this slice, or vocab_local for
// "not ours" (sorted last, skipped). (A template only so that the header
// defines no non-inline kernel: one definition per program.)
template <class I>
__global__ void k_embedding_keys(std::size_t rows, const I* ids, std::size_t vocab_offset,
                                        std::size_t vocab_local, std::uint32_t* keys, std::uint32_t* rows_out,
                                        device_status* st) {
  for (std::size_t r = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; r < rows;
       r += std::size_t(gridDim.x) * blockDim.x) {
    const I id = ids[r];
    std::uint32_t k = static_cast<std::uint32_t>(vocab_local);
    if (id < 0)
      report_label(st, kc_embedding_backward, r, id, 0, INT32_MAX);
    else if (std::size_t(id) >= vocab_offset && std::size_t(id) - vocab_offset < vocab_local)
      k = static_cast<std::uint32_t>(std::size_t(id) - vocab_offset);
    keys[r] = k;
    rows_out[r] = static_cast<std::uint32_t>(r);
  }
}

// One block per (sorted position, column tile); only the first position of
// each id's run works: it adds that id's dout rows (T, converted exactly to
// G) in row order (the sort is stable), in G, onto the table row, exactly as
// the host does.
template <class T, class G>
__global__ void k_embedding_accumulate(std::size_t rows, std::size_t D, const std::uint32_t* keys,
                                       const std::uint32_t* order, const T* dout, std::uint32_t vocab_local,
                                       G* dtable) {
  const std::size_t i = blockIdx.x;
  const std::uint32_t key = keys[i];
  if (key >= vocab_local || (i > 0 && keys[i - 1] == key)) return;
  const std::size_t c = blockIdx.y * std::size_t(blockDim.x) + threadIdx.x;
  if (c >= D) return;
  G* d = dtable + std::size_t(key) * D + c;
  G acc = *d;
  for (std::size_t k = i; k < rows && keys[k] == key; ++k) acc += G(dout[std::size_t(order[k]) * D + c]);
  *d = acc;
}

// y[r, j] = x[r, j] + pos[(row0 + r) mod seq, j], in compute_t<T>. A vector never
// straddles rows (D % W == 0 when W > 1).
template <class T, int W>
__global__ void k_position_forward(std::size_t rows, std::size_t D, std::size_t seq, std::size_t row0, const T* x,
                                   const T* pos, T* y) {
  using C = compute_t<T>;
  const bool small = rows * D <= 0xffffffffull;
  flat_loop<W>(rows * D, [&](std::size_t i, auto w) {
    constexpr int V = decltype(w)::value;
    const std::size_t r = d_div(i, D, small), j = i - r * D;
    T xv[V], pv[V];
    load<V>(x + i, xv);
    load<V>(pos + ((row0 + r) % seq) * D + j, pv);
#pragma unroll
    for (int k = 0; k < V; ++k) xv[k] = T(C(xv[k]) + C(pv[k]));
    store<V>(y + i, xv);
  });
}

// One thread per (position t, column j): dpos[t, j] (+)= the dy[r, j] of the rows r at
// position t, in row order, in double (the host's order: the same bits).
template <class T, class G>
__global__ void k_position_backward(std::size_t rows, std::size_t D, std::size_t seq, std::size_t row0, const T* dy,
                                    G* dpos, bool accumulate) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < seq * D;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t t = i / D, j = i - t * D;
    double acc = accumulate ? double(dpos[i]) : 0.0;
    const std::size_t first = (t + seq - row0 % seq) % seq;  // the first local row at position t
    for (std::size_t r = first; r < rows; r += seq) acc += double(dy[r * D + j]);
    dpos[i] = G(acc);
  }
}

// One thread per sequence: a scan of `seq` ids (sequences are short next to the work
// around this call).
template <class I>
__global__ void k_segment_ids(std::size_t samples, std::size_t seq, const I* ids, I sep, I last, I* types) {
  for (std::size_t s = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; s < samples;
       s += std::size_t(gridDim.x) * blockDim.x) {
    I t = 0;
    for (std::size_t j = s * seq; j < (s + 1) * seq; ++j) {
      types[j] = t;
      if (ids[j] == sep && t < last) ++t;
    }
  }
}

inline int bits_for(std::size_t v) {
  int b = 1;
  while (b < 32 && (std::size_t(1) << b) <= v) ++b;
  return b;
}

}  // namespace detail

// Static members on arguments the front has checked (impl::embedding_kernels<queue>).
struct embedding_kernels {
  // Device ids: a kernel finds the first bad position, read back (SYNCHRONIZES q). Ordinary
  // (pageable) host memory is checked on the host, without touching the device.
  static void check_ids(queue& q, const std::int32_t* ids, std::size_t n, std::size_t vocab) {
    if (detail::host_only_pointer(ids)) return backend::detail::check_host_ids(ids, n, vocab);
    detail::queue_state& s = q.state();
    unsigned long long* flag = &s.dev_slots->first_bad_id;
    STRATA_CUDA_CHECK(cudaMemsetAsync(flag, 0xff, sizeof *flag, s.stream));
    detail::k_check_ids<std::int32_t>
        <<<detail::flat_grid(q, n), detail::flat_threads, 0, s.stream>>>(n, ids, vocab, flag);
    STRATA_CUDA_CHECK_LAUNCH("k_check_ids");
    STRATA_CUDA_CHECK(
        cudaMemcpyAsync(&s.host_slots->first_bad_id, flag, sizeof *flag, cudaMemcpyDeviceToHost, s.stream));
    q.synchronize();
    const unsigned long long pos = s.host_slots->first_bad_id;
    if (pos == ~0ull) return;
    std::int32_t id = 0;
    STRATA_CUDA_CHECK(cudaMemcpyAsync(&s.host_slots->flag, ids + pos, sizeof id, cudaMemcpyDeviceToHost, s.stream));
    q.synchronize();
    std::memcpy(&id, &s.host_slots->flag, sizeof id);
    backend::detail::bad_id(id, static_cast<std::size_t>(pos), vocab);
  }

  // A negative id gives a NaN row and is reported (raise_device_errors).
  template <class T>
  static void embedding_forward(queue& q, std::size_t rows, std::size_t D, const std::int32_t* ids, const T* table,
                                std::size_t vocab_offset, std::size_t vocab_local, T* out) {
    constexpr int W = detail::vec_width<T>;
    if (D % W == 0 && detail::aligned16(out) && (!table || detail::aligned16(table)))
      detail::k_embedding_forward<T, W><<<detail::flat_grid(q, rows * D / W), detail::flat_threads, 0, q.stream()>>>(
          rows, D, ids, table, vocab_offset, vocab_local, out, detail::status_word(q));
    else
      detail::k_embedding_forward<T, 1><<<detail::flat_grid(q, rows * D), detail::flat_threads, 0, q.stream()>>>(
          rows, D, ids, table, vocab_offset, vocab_local, out, detail::status_word(q));
    STRATA_CUDA_CHECK_LAUNCH("k_embedding_forward");
  }

  // A stable radix sort of (id, row) pairs groups each id's rows, then one block per id and
  // column tile adds them in row order (bit-identical to the host).
  template <class T, class G>
  static void embedding_backward(queue& q, std::size_t rows, std::size_t D, const std::int32_t* ids, const T* dout,
                                 std::size_t vocab_offset, std::size_t vocab_local, G* dtable, bool accumulate) {
    detail::need(rows <= std::size_t(INT_MAX) && vocab_local < std::size_t(UINT32_MAX) &&
                     D <= std::size_t(65535) * 128,
                 "embedding_backward", "more than 2^31 rows, 2^32 table rows or 8M columns");
    if (!accumulate) STRATA_CUDA_CHECK(cudaMemsetAsync(dtable, 0, vocab_local * D * sizeof(G), q.stream()));
    if (rows == 0) return;
    const int n = static_cast<int>(rows);
    const int end_bit = detail::bits_for(vocab_local);
    std::size_t temp = 0;
    STRATA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp, static_cast<const std::uint32_t*>(nullptr),
                                                      static_cast<std::uint32_t*>(nullptr),
                                                      static_cast<const std::uint32_t*>(nullptr),
                                                      static_cast<std::uint32_t*>(nullptr), n, 0, end_bit,
                                                      q.stream()));
    const std::size_t arr = rows * sizeof(std::uint32_t);
    detail::scratch sc = detail::get_scratch(q, detail::carve_bytes(arr, arr, arr, arr, temp));
    detail::carver cv{sc.p};
    auto* keys_in = cv.take<std::uint32_t>(rows);
    auto* rows_in = cv.take<std::uint32_t>(rows);
    auto* keys_out = cv.take<std::uint32_t>(rows);
    auto* rows_out = cv.take<std::uint32_t>(rows);
    void* temp_p = cv.take<unsigned char>(temp);
    detail::k_embedding_keys<std::int32_t><<<detail::flat_grid(q, rows), detail::flat_threads, 0, q.stream()>>>(
        rows, ids, vocab_offset, vocab_local, keys_in, rows_in, detail::status_word(q));
    STRATA_CUDA_CHECK_LAUNCH("k_embedding_keys");
    STRATA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp_p, temp, keys_in, keys_out, rows_in, rows_out, n, 0,
                                                      end_bit, q.stream()));
    const unsigned tile = 128;
    const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>((D + tile - 1) / tile));
    detail::k_embedding_accumulate<T, G><<<grid, tile, 0, q.stream()>>>(
        rows, D, keys_out, rows_out, dout, static_cast<std::uint32_t>(vocab_local), dtable);
    STRATA_CUDA_CHECK_LAUNCH("k_embedding_accumulate");
  }

  template <class T>
  static void position_forward(queue& q, std::size_t rows, std::size_t D, std::size_t seq, std::size_t row0,
                               const T* x, const T* pos, T* y) {
    constexpr int W = detail::vec_width<T>;
    if (D % W == 0 && detail::aligned16(x) && detail::aligned16(pos) && detail::aligned16(y))
      detail::k_position_forward<T, W><<<detail::flat_grid(q, rows * D / W), detail::flat_threads, 0, q.stream()>>>(
          rows, D, seq, row0, x, pos, y);
    else
      detail::k_position_forward<T, 1><<<detail::flat_grid(q, rows * D), detail::flat_threads, 0, q.stream()>>>(
          rows, D, seq, row0, x, pos, y);
    STRATA_CUDA_CHECK_LAUNCH("k_position_forward");
  }

  template <class T, class G>
  static void position_backward(queue& q, std::size_t rows, std::size_t D, std::size_t seq, std::size_t row0,
                                const T* dy, G* dpos, bool accumulate) {
    detail::k_position_backward<T, G><<<detail::flat_grid(q, seq * D), detail::flat_threads, 0, q.stream()>>>(
        rows, D, seq, row0, dy, dpos, accumulate);
    STRATA_CUDA_CHECK_LAUNCH("k_position_backward");
  }

  static void segment_ids(queue& q, std::size_t samples, std::size_t seq, const std::int32_t* ids,
                          std::int32_t sep, std::int32_t last, std::int32_t* types) {
    detail::k_segment_ids<std::int32_t><<<detail::flat_grid(q, samples), detail::flat_threads, 0, q.stream()>>>(samples, seq, ids,
                                                                                                 sep, last, types);
    STRATA_CUDA_CHECK_LAUNCH("k_segment_ids");
  }
};

}  // namespace strata::backend::cuda

namespace strata::backend::impl {
template <>
struct embedding_kernels<cuda::queue> : cuda::embedding_kernels {};
}  // namespace strata::backend::impl
