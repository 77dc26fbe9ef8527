// strata-header: cuda-only
#pragma once
// strata CUDA backend, attention: the CUDA implementation of backend/attention.hpp
// (layouts and contracts there).
//
// One kernel each, plainly written: the permutations are one thread per element (a
// grid-stride loop over the output, so writes are coalesced); the softmaxes are one
// thread group per score row (launch.cuh's with_row_threads), maxima in compute_t<T>,
// sums in double through the deterministic group reductions of device.cuh; the merge of
// partial attentions one thread per element. Flash
// attention is three fused tile kernels (forward; backward dQ; backward dK and dV),
// described in flash.cuh and flash_backward.cuh, launched here.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "strata/backend/attention.hpp"
#include "strata/backend/cuda/device.cuh"
#include "strata/backend/cuda/flash_backward.cuh"
#include "strata/backend/cuda/flash_mma_backward.cuh"
#include "strata/core/math.hpp"

namespace strata::backend::cuda {

namespace detail {

// The shape of one permutation: token rows [seqs, seq, heads, parts, dh] against
// head-major [parts][seqs, heads, seq, dh].
struct head_layout {
  std::size_t seqs, seq, heads, parts, dh;
  // The offset in the token rows of the element at head-major offset o; I = 32 bits when
  // every offset fits (a 64-bit division is a long emulated sequence).
  template <class I>
  __device__ I row_offset(I o) const {
    const I d = o % I(dh);
    I rest = o / I(dh);
    const I t = rest % I(seq);
    rest /= I(seq);
    const I h = rest % I(heads);
    rest /= I(heads);
    const I s = rest % I(seqs);
    const I p = rest / I(seqs);
    return ((s * I(seq) + t) * I(heads) + h) * I(parts) * I(dh) + p * I(dh) + d;
  }
  // The offset in head-major order of the element at token-row offset o.
  template <class I>
  __device__ I head_offset(I o) const {
    const I d = o % I(dh);
    I rest = o / I(dh);
    const I p = rest % I(parts);
    rest /= I(parts);
    const I h = rest % I(heads);
    rest /= I(heads);
    const I t = rest % I(seq);
    const I s = rest / I(seq);
    return p * I(seqs * heads * seq * dh) + ((s * I(heads) + h) * I(seq) + t) * I(dh) + d;
  }
  std::size_t size() const { return seqs * seq * heads * parts * dh; }
};

// out[o] = rows[row_offset(o)] for every head-major offset o (offsets of type I).
template <class T, class I>
__global__ void k_heads_from_rows(head_layout L, std::size_t n, const T* __restrict__ rows, T* __restrict__ out) {
  for (std::size_t o = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; o < n;
       o += std::size_t(gridDim.x) * blockDim.x)
    out[o] = rows[L.row_offset(I(o))];
}

// rows[o] = in[head_offset(o)] for every token-row offset o.
template <class T, class I>
__global__ void k_rows_from_heads(head_layout L, std::size_t n, const T* __restrict__ in, T* __restrict__ rows) {
  for (std::size_t o = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; o < n;
       o += std::size_t(gridDim.x) * blockDim.x)
    rows[o] = in[L.head_offset(I(o))];
}

// One group of TH threads per score row r (RPB rows per block); row r is row
// i = r mod seq of its matrix, and a causal row reads only its first i + 1 columns.
// Each thread reads and writes only its own columns, so p may alias s.
template <class T, int TH, int RPB>
__global__ void __launch_bounds__(TH* RPB)
    k_attention_softmax_forward(std::size_t rows, std::size_t seq, compute_t<T> a, bool causal, const T* s, T* p) {
  using C = compute_t<T>;
  __shared__ C sm[RPB][TH / 32];
  __shared__ double sd[RPB][TH / 32];
  const int g = int(threadIdx.x) / TH, t = int(threadIdx.x) % TH;
  const std::size_t r = std::size_t(blockIdx.x) * RPB + g;
  const bool active = r < rows;
  const std::size_t n = !active ? 0 : causal ? r % seq + 1 : seq;
  const T* x = s + (active ? r : 0) * seq;

  C m = d_neg_inf<C>();
  for (std::size_t j = t; j < n; j += TH) {
    const C v = a * C(x[j]);
    m = v > m ? v : m;
  }
  m = group<TH>::max(m, sm[g]);
  double sum = 0;
  for (std::size_t j = t; j < n; j += TH) sum += double(d_exp(a * C(x[j]) - m));
  sum = group<TH>::sum(sum, sd[g]);
  if (!active) return;  // no barriers below

  T* y = p + r * seq;
  const C inv = C(1.0 / sum);
  for (std::size_t j = t; j < seq; j += TH) y[j] = j < n ? T(d_exp(a * C(x[j]) - m) * inv) : d_zero<T>();
}

// ds[r, j] = a · p[r, j] · (dp[r, j] − Σ_k p[r, k]·dp[r, k]), the dot in double.
// Masked entries need no case of their own: p is 0 there, so ds is too. Each
// thread reads and writes only its own columns, so ds may alias dp.
template <class T, int TH, int RPB>
__global__ void __launch_bounds__(TH* RPB)
    k_attention_softmax_backward(std::size_t rows, std::size_t seq, compute_t<T> a, const T* p, const T* dp, T* ds) {
  using C = compute_t<T>;
  __shared__ double sd[RPB][TH / 32];
  const int g = int(threadIdx.x) / TH, t = int(threadIdx.x) % TH;
  const std::size_t r = std::size_t(blockIdx.x) * RPB + g;
  const bool active = r < rows;
  const std::size_t off = (active ? r : 0) * seq;
  const T* pr = p + off;
  const T* gr = dp + off;

  double dot = 0;
  if (active)
    for (std::size_t j = t; j < seq; j += TH) dot += double(C(pr[j])) * double(C(gr[j]));
  dot = group<TH>::sum(dot, sd[g]);
  if (!active) return;  // no barriers below

  const C d = C(dot);
  T* o = ds + off;
  for (std::size_t j = t; j < seq; j += TH) o[j] = T(a * C(pr[j]) * (C(gr[j]) - d));
}

// One thread per (row, pair): the pair (x_i, x_{i+h}) of row r, rotated in place.
template <class T>
__global__ void k_rotary(std::size_t rows, std::size_t seq, std::size_t dh, long long pos0, double base, bool inverse,
                         T* x) {
  const std::size_t h = dh / 2, n = rows * h;
  for (std::size_t o = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; o < n;
       o += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t r = o / h, i = o % h;
    T* row = x + r * dh;
    double a = double(compute_t<T>(row[i])), b = double(compute_t<T>(row[i + h]));
    math::rope_rotate(a, b, pos0 + static_cast<long long>(r % seq), i, dh, base, inverse);
    row[i] = T(compute_t<T>(a));
    row[i + h] = T(compute_t<T>(b));
  }
}

// attention_merge in two passes, so that no thread reads a row's lse another has written:
// one thread per element merges o with the weights of its row; then one per row, the lse.
template <class T, class L>
__global__ void k_attention_merge_o(std::size_t rows, std::size_t dh, T* o, const L* lse, const T* o_b,
                                    const L* lse_b) {
  using W = std::common_type_t<compute_t<T>, L>;
  const std::size_t n = rows * dh;
  for (std::size_t e = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; e < n;
       e += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t r = e / dh;
    W wa, wb;
    math::lse_merge(W(lse[r]), W(lse_b[r]), wa, wb);
    o[e] = T(compute_t<T>(wa * W(compute_t<T>(o[e])) + wb * W(compute_t<T>(o_b[e]))));
  }
}
template <class L>
__global__ void k_attention_merge_lse(std::size_t rows, L* lse, const L* lse_b) {
  for (std::size_t r = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; r < rows;
       r += std::size_t(gridDim.x) * blockDim.x) {
    L wa, wb;
    lse[r] = math::lse_merge(lse[r], lse_b[r], wa, wb);
  }
}

}  // namespace detail

// Static members on arguments the front has checked (impl::attention_kernels<queue>).
struct attention_kernels {
  // Both permutations move whole runs of dh contiguous elements: they run on the widest
  // word (16, 8 or 4 bytes, else T) that divides a run and the pointers' alignment, as a permutation
  // of that word with dh counted in words (a fraction of the index arithmetic per byte).
  template <class T>
  static void heads_from_rows(queue& q, std::size_t seqs, std::size_t seq, std::size_t heads, std::size_t parts,
                              std::size_t dh, const T* rows, T* out) {
    with_run_word<T>(dh * sizeof(T), rows, out, [&](auto word) {
      using W = decltype(word);
      const detail::head_layout L{seqs, seq, heads, parts, dh * sizeof(T) / sizeof(W)};
      const std::size_t n = L.size();
      auto* kernel =
          n <= 0xffffffffu ? detail::k_heads_from_rows<W, std::uint32_t> : detail::k_heads_from_rows<W, std::size_t>;
      kernel<<<detail::flat_grid(q, n), detail::flat_threads, 0, q.stream()>>>(
          L, n, reinterpret_cast<const W*>(rows), reinterpret_cast<W*>(out));
    });
    STRATA_CUDA_CHECK_LAUNCH("k_heads_from_rows");
  }

  template <class T>
  static void rows_from_heads(queue& q, std::size_t seqs, std::size_t seq, std::size_t heads, std::size_t parts,
                              std::size_t dh, const T* in, T* rows) {
    with_run_word<T>(dh * sizeof(T), in, rows, [&](auto word) {
      using W = decltype(word);
      const detail::head_layout L{seqs, seq, heads, parts, dh * sizeof(T) / sizeof(W)};
      const std::size_t n = L.size();
      auto* kernel =
          n <= 0xffffffffu ? detail::k_rows_from_heads<W, std::uint32_t> : detail::k_rows_from_heads<W, std::size_t>;
      kernel<<<detail::flat_grid(q, n), detail::flat_threads, 0, q.stream()>>>(
          L, n, reinterpret_cast<const W*>(in), reinterpret_cast<W*>(rows));
    });
    STRATA_CUDA_CHECK_LAUNCH("k_rows_from_heads");
  }

 private:
  // Calls f(W{}) for the widest of uint4, uint2, std::uint32_t dividing `run_bytes` and both
  // pointers' alignment; f(T{}) otherwise.
  template <class T, class F>
  static void with_run_word(std::size_t run_bytes, const void* a, const void* b, F&& f) {
    const std::uintptr_t mis = reinterpret_cast<std::uintptr_t>(a) | reinterpret_cast<std::uintptr_t>(b) | run_bytes;
    if (mis % 16 == 0)
      f(uint4{});
    else if (mis % 8 == 0)
      f(uint2{});
    else if (mis % 4 == 0)
      f(std::uint32_t{});
    else
      f(T{});
  }

 public:
  template <class T>
  static void attention_softmax_forward(queue& q, std::size_t batch, std::size_t seq, double scale, bool causal,
                                        const T* s, T* p) {
    using C = detail::compute_t<T>;
    const std::size_t rows = batch * seq;
    detail::with_row_threads(seq, [&](auto th, auto rpb) {
      constexpr int TH = decltype(th)::value, RPB = decltype(rpb)::value;
      detail::k_attention_softmax_forward<T, TH, RPB>
          <<<static_cast<unsigned>((rows + RPB - 1) / RPB), TH * RPB, 0, q.stream()>>>(rows, seq, C(scale), causal,
                                                                                        s, p);
    });
    STRATA_CUDA_CHECK_LAUNCH("k_attention_softmax_forward");
  }

  template <class T>
  static void attention_softmax_backward(queue& q, std::size_t batch, std::size_t seq, double scale, const T* p,
                                         const T* dp, T* ds) {
    using C = detail::compute_t<T>;
    const std::size_t rows = batch * seq;
    detail::with_row_threads(seq, [&](auto th, auto rpb) {
      constexpr int TH = decltype(th)::value, RPB = decltype(rpb)::value;
      detail::k_attention_softmax_backward<T, TH, RPB>
          <<<static_cast<unsigned>((rows + RPB - 1) / RPB), TH * RPB, 0, q.stream()>>>(rows, seq, C(scale), p, dp,
                                                                                        ds);
    });
    STRATA_CUDA_CHECK_LAUNCH("k_attention_softmax_backward");
  }

  template <class T, class L>
  static void flash_attention_forward(queue& q, const flash_shape& f, const T* qh, const T* kh, const T* vh, T* o,
                                      L* lse) {
    if constexpr (detail::flash_mma_types<T, L>) {
      if (detail::flash_mma_usable<T, L>(f, {qh, kh, vh, o})) {
        detail::with_mma_dh(f.dh, [&](auto dd) {
          using cfg = detail::mma_fwd_cfg<decltype(dd)::value>;
          const unsigned grid = detail::flash_grid("flash_attention_forward", f.items, f.q_len, cfg::BM);
          detail::with_flash_drop(f.dropping(), [&](auto drop) {
            auto* kernel = detail::k_flash_mma_forward<T, L, decltype(dd)::value, decltype(drop)::value>;
            detail::flash_smem_optin(kernel, cfg::smem);
            kernel<<<grid, detail::mma_warps * 32, cfg::smem, q.stream()>>>(f, float(f.scale * detail::mma_log2e), qh,
                                                                            kh, vh, o, lse);
          });
        });
        STRATA_CUDA_CHECK_LAUNCH("k_flash_mma_forward");
        return;
      }
    }
    using C = detail::compute_t<T>;
    detail::with_flash_dh("flash_attention_forward", f.dh, [&](auto dmax) {
      constexpr int DMAX = decltype(dmax)::value, BQ = detail::flash_warps * detail::flash_rows<C, DMAX>;
      const std::size_t ks = f.dh | 1;
      const std::size_t smem = (BQ * f.dh + detail::flash_tile * (ks + f.dh)) * sizeof(C);
      const unsigned grid = detail::flash_grid("flash_attention_forward", f.items, f.q_len, BQ);
      detail::with_flash_drop(f.dropping(), [&](auto drop) {
        auto* kernel = detail::k_flash_forward<T, L, DMAX, decltype(drop)::value>;
        detail::flash_smem_optin(kernel, smem);
        kernel<<<grid, detail::flash_warps * 32, smem, q.stream()>>>(f, C(f.scale), qh, kh, vh, o, lse);
      });
    });
    STRATA_CUDA_CHECK_LAUNCH("k_flash_forward");
  }

  template <class T, class L>
  static void attention_merge(queue& q, std::size_t rows, std::size_t dh, T* o, L* lse, const T* o_b,
                              const L* lse_b) {
    const std::size_t n = rows * dh;
    detail::k_attention_merge_o<T, L>
        <<<detail::flat_grid(q, n), detail::flat_threads, 0, q.stream()>>>(rows, dh, o, lse, o_b, lse_b);
    STRATA_CUDA_CHECK_LAUNCH("k_attention_merge_o");
    detail::k_attention_merge_lse<L>
        <<<detail::flat_grid(q, rows), detail::flat_threads, 0, q.stream()>>>(rows, lse, lse_b);
    STRATA_CUDA_CHECK_LAUNCH("k_attention_merge_lse");
  }

  template <class T>
  static void rotary_embedding(queue& q, std::size_t items, std::size_t seq, std::size_t dh, long long pos0,
                               double base, bool inverse, T* x) {
    const std::size_t n = items * seq * (dh / 2);
    detail::k_rotary<T><<<detail::flat_grid(q, n), detail::flat_threads, 0, q.stream()>>>(items * seq, seq, dh, pos0,
                                                                                            base, inverse, x);
    STRATA_CUDA_CHECK_LAUNCH("k_rotary");
  }

  // Two kernels, each output written by one block in a fixed order: dQ per query tile,
  // dK and dV per key tile of a kv item (no atomics). The tensor-core pair reads δ = do·o from
  // the queue's workspace (one kernel before them); the SIMT pair recomputes it in both.
  template <class T, class L>
  static void flash_attention_backward(queue& q, const flash_shape& f, const T* qh, const T* kh, const T* vh,
                                       const T* o, const T* dout, const L* lse, T* dq, T* dk, T* dv) {
    if constexpr (detail::flash_mma_types<T, L>) {
      if (detail::flash_mma_usable<T, L>(f, {qh, kh, vh, o, dout, dq, dk, dv})) {
        detail::with_mma_dh(f.dh, [&](auto dd) {
          constexpr int D = decltype(dd)::value;
          using dq_cfg = detail::mma_dq_cfg<D>;
          using kv_cfg = detail::mma_kv_cfg<D>;
          const float scale = float(f.scale), scale_log2 = float(f.scale * detail::mma_log2e);
          const unsigned grid_dq = detail::flash_grid("flash_attention_backward", f.items, f.q_len, dq_cfg::BM);
          const unsigned grid_kv = detail::flash_grid("flash_attention_backward", f.kv_items(), f.k_len, kv_cfg::BK);
          const std::size_t rows = f.items * f.q_len;
          detail::scratch sc = detail::get_scratch(q, rows * sizeof(float));
          float* delta = reinterpret_cast<float*>(sc.p);
          detail::k_flash_mma_delta<T, D><<<static_cast<unsigned>((rows * 8 + 255) / 256), 256, 0, q.stream()>>>(
              rows, o, dout, delta);
          STRATA_CUDA_CHECK_LAUNCH("k_flash_mma_delta");
          detail::with_flash_drop(f.dropping(), [&](auto drop) {
            constexpr bool Drop = decltype(drop)::value;
            auto* kdq = detail::k_flash_mma_backward_dq<T, L, D, Drop>;
            detail::flash_smem_optin(kdq, dq_cfg::smem);
            kdq<<<grid_dq, detail::mma_warps * 32, dq_cfg::smem, q.stream()>>>(f, scale_log2, scale, qh, kh, vh, dout,
                                                                               lse, delta, dq);
            STRATA_CUDA_CHECK_LAUNCH("k_flash_mma_backward_dq");
            auto* kkv = detail::k_flash_mma_backward_dkdv<T, L, D, Drop>;
            detail::flash_smem_optin(kkv, kv_cfg::smem);
            kkv<<<grid_kv, detail::mma_warps * 32, kv_cfg::smem, q.stream()>>>(f, scale_log2, scale, qh, kh, vh, dout,
                                                                               lse, delta, dk, dv);
            STRATA_CUDA_CHECK_LAUNCH("k_flash_mma_backward_dkdv");
          });
        });
        return;
      }
    }
    using C = detail::compute_t<T>;
    detail::with_flash_dh("flash_attention_backward", f.dh, [&](auto dmax) {
      constexpr int DMAX = decltype(dmax)::value, B = detail::flash_warps * detail::flash_rows_bwd<C, DMAX>;
      constexpr int T32 = detail::flash_tile;
      const std::size_t ks = f.dh | 1;
      const C scale = C(f.scale);

      const std::size_t smem_dq = (2 * B * f.dh + 2 * T32 * ks) * sizeof(C);
      const unsigned grid_dq = detail::flash_grid("flash_attention_backward", f.items, f.q_len, B);
      const std::size_t smem_kv = (2 * B * f.dh + 2 * T32 * ks + 2 * T32) * sizeof(C);
      const unsigned grid_kv = detail::flash_grid("flash_attention_backward", f.kv_items(), f.k_len, B);
      detail::with_flash_drop(f.dropping(), [&](auto drop) {
        constexpr bool Drop = decltype(drop)::value;
        auto* kdq = detail::k_flash_backward_dq<T, L, DMAX, Drop>;
        detail::flash_smem_optin(kdq, smem_dq);
        kdq<<<grid_dq, detail::flash_warps * 32, smem_dq, q.stream()>>>(f, scale, qh, kh, vh, o, dout, lse, dq);
        STRATA_CUDA_CHECK_LAUNCH("k_flash_backward_dq");

        auto* kkv = detail::k_flash_backward_dkdv<T, L, DMAX, Drop>;
        detail::flash_smem_optin(kkv, smem_kv);
        kkv<<<grid_kv, detail::flash_warps * 32, smem_kv, q.stream()>>>(f, scale, qh, kh, vh, o, dout, lse, dk, dv);
        STRATA_CUDA_CHECK_LAUNCH("k_flash_backward_dkdv");
      });
    });
  }
};

}  // namespace strata::backend::cuda

namespace strata::backend::impl {
template <>
struct attention_kernels<cuda::queue> : cuda::attention_kernels {};
}  // namespace strata::backend::impl
