// strata-header: cuda-only
#pragma once
// strata CUDA backend, flash attention (backend/attention.hpp: flash_attention_forward and
// backward): what the three tile kernels share, and the forward kernel. The backward's
// kernels are in flash_backward.cuh, the launches in attention.cuh.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "strata/backend/attention.hpp"
#include "strata/backend/cuda/device.cuh"

namespace strata::backend::cuda::detail {

// Three kernels of the same shape (the forward here, dQ and dK/dV in flash_backward.cuh):
// 4 warps per block, each warp owning R "rows" (query rows in the forward and dQ kernels,
// key rows in the dK/dV kernel) while its 32 lanes walk a tile of 32 partners (keys,
// resp. queries), one partner per lane. A lane forms
// its partner's dot product with each of its warp's rows from shared memory (the rows'
// values are broadcast, the partner's row is read at a stride of dh | 1 so the 32 lanes
// hit 32 banks); the row sums over the 32 partners then take each partner's
// coefficient by shuffle while lane l accumulates columns l, l + 32, ... of its rows.
// Everything runs in C = compute_t<T> (inputs converted on their way into shared
// memory, outputs rounded once). DMAX (64, 128, 256) sizes the per-thread column
// arrays; shared memory is sized by the runtime dh.
inline constexpr int flash_warps = 4, flash_tile = 32;
// Rows per warp R: a thread holds R·DMAX/32 accumulators (two sets in dK/dV, whose R the
// dQ kernel shares for its shared memory's sake), about 64 32-bit registers at most.
template <class C, int DMAX>
inline constexpr int flash_rows = std::min(8, 2048 / (DMAX * int(sizeof(C) / 4)));
template <class C, int DMAX>
inline constexpr int flash_rows_bwd = std::min(8, 1024 / (DMAX * int(sizeof(C) / 4)));

// Raw dynamic shared memory; each kernel carves it into its C arrays.
extern __shared__ __align__(16) unsigned char flash_smem[];

// rows × dh values of `src` (rows from `first`, `valid` of them in range) into a tile of
// row stride `ld`, converted to C; rows past `valid` are zeros, so masked partners
// multiply finite numbers.
template <class T, class C>
__device__ __forceinline__ void flash_load(C* tile, int ld, const T* src, std::size_t first, std::size_t valid,
                                           int rows, int dh) {
  for (int e = int(threadIdx.x); e < rows * dh; e += int(blockDim.x)) {
    const int r = e / dh, d = e - r * dh;
    tile[r * ld + d] = first + r < valid ? C(src[(first + r) * dh + d]) : C(0);
  }
}

// δ = do·o for one query row (do already in shared memory as C, o from global), summed by
// the warp in a fixed order; the dQ and dK/dV kernels both call this, so they agree.
template <class T, class C>
__device__ __forceinline__ C flash_delta(const C* dorow, const T* orow, int dh, int lane) {
  C s = 0;
  for (int d = lane; d < dh; d += 32) s += dorow[d] * C(orow[d]);
  return group<32>::sum<C>(s, nullptr);
}

// Whether query i sees key j (flash_shape's masking rule, shared with the host).
__device__ __forceinline__ bool flash_visible(const flash_shape& f, std::size_t i, std::size_t j) {
  return j < f.keys_seen_by(i);
}

// acc[r][c] += Σ_j coef_j[r] · tile[j][lane + 32c] over the 32 partners j of a tile: lane j
// holds its partner's coefficient for each of the warp's R rows, broadcast by shuffle.
template <int R, int NC, class C>
__device__ __forceinline__ void flash_accumulate(C (&acc)[R][NC], const C (&coef)[R], const C* tile, int ld, int dh,
                                                 int lane) {
  for (int j = 0; j < flash_tile; ++j) {
    C p[R];
#pragma unroll
    for (int r = 0; r < R; ++r) p[r] = __shfl_sync(0xffffffffu, coef[r], j);
    const C* row = tile + j * ld;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      if (lane + 32 * c >= dh) break;
      const C x = row[lane + 32 * c];
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r][c] += p[r] * x;
    }
  }
}

// out[lane + 32c] = factor · acc[c]: a row's columns, rounded once to T.
template <int NC, class T, class C>
__device__ __forceinline__ void flash_store(T* out, const C (&acc)[NC], C factor, int dh, int lane) {
#pragma unroll
  for (int c = 0; c < NC; ++c)
    if (lane + 32 * c < dh) out[lane + 32 * c] = T(factor * acc[c]);
}

// Attention dropout (flash_shape::drop) in the kernels instantiated with Drop = true; those
// with Drop = false have none of it (a call that does not drop launches them). The step's key
// is read once per thread, a row's key hashed once per thread that needs it, an element's
// feature once.
template <bool Drop>
__device__ __forceinline__ std::uint64_t flash_step_key(const flash_shape& f) {
  if constexpr (Drop) return *f.drop.key;
  else return 0;
}

// Calls f(ic<DMAX>) for the smallest supported maximum >= dh (the front checked dh > 0).
template <class F>
void with_flash_dh(const char* kernel, std::size_t dh, F&& f) {
  need(dh <= 256, kernel, "dh must be <= 256 on the CUDA backend");
  if (dh <= 64)
    f(ic<64>{});
  else if (dh <= 128)
    f(ic<128>{});
  else
    f(ic<256>{});
}
// One block per tile of each item, as a 1-D grid (its limit is 2^31 − 1 blocks).
inline unsigned flash_grid(const char* kernel, std::size_t items, std::size_t len, int tile) {
  const std::size_t blocks = items * ((len + tile - 1) / tile);
  need(blocks <= 0x7fffffffu, kernel, "too many blocks for one launch");
  return static_cast<unsigned>(blocks);
}
// Over 48 KiB of dynamic shared memory needs the kernel's opt-in (per device; cheap and
// allowed during graph capture, so it is simply set before each such launch).
template <class K>
void flash_smem_optin(K* kernel, std::size_t bytes) {
  if (bytes > 48 * 1024)
    STRATA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}
// Calls f(std::bool_constant<drop>{}): the kernels with dropout only where the call drops.
template <class F>
void with_flash_drop(bool drop, F&& f) {
  if (drop)
    f(std::true_type{});
  else
    f(std::false_type{});
}

// Forward. Block: BQ = 4R query rows of one item (the heaviest tiles, the last under
// causal masking, first); it loops over the visible key tiles of 32 keeping, per row,
// the running max m, each lane's share of the running sum l, and o's columns. Shared:
// Q [BQ][dh], K [32][dh | 1], V [32][dh]. Dropout scales each coefficient of o after the
// row's sum has taken it undropped (lse is the softmax's).
template <class T, class L, int DMAX, bool Drop>
__global__ void __launch_bounds__(flash_warps * 32)
    k_flash_forward(flash_shape f, compute_t<T> scale, const T* __restrict__ qh, const T* __restrict__ kh,
                    const T* __restrict__ vh, T* __restrict__ o, L* __restrict__ lse) {
  using C = compute_t<T>;
  constexpr int R = flash_rows<C, DMAX>, BQ = flash_warps * R, NC = DMAX / 32;
  const int dh = int(f.dh), ks = dh | 1, warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  C* sq = reinterpret_cast<C*>(flash_smem);
  C* sk = sq + BQ * dh;
  C* sv = sk + flash_tile * ks;

  const std::size_t tiles = (f.q_len + BQ - 1) / BQ, item = blockIdx.x / tiles;
  const std::size_t qt = (tiles - 1 - blockIdx.x % tiles) * BQ;
  const std::size_t kend = f.keys_seen_by(d_min(qt + BQ, f.q_len) - 1);  // what the tile's last query sees
  const T* kb = kh + f.kv_item_of(item) * f.k_len * dh;
  const T* vb = vh + f.kv_item_of(item) * f.k_len * dh;
  flash_load(sq, dh, qh + item * f.q_len * dh, qt, f.q_len, BQ, dh);

  [[maybe_unused]] const std::uint64_t key = flash_step_key<Drop>(f);
  [[maybe_unused]] const std::uint64_t feature0 = Drop ? f.drop_feature0(item) : 0;
  [[maybe_unused]] const C rs = C(f.drop.scale);
  [[maybe_unused]] std::uint64_t rk[Drop ? R : 1];  // the rows' dropout keys
  C m[R], l[R], acc[R][NC];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if constexpr (Drop) rk[r] = f.drop_row_key(key, item, qt + warp * R + r);
    m[r] = d_neg_inf<C>();
    l[r] = 0;
#pragma unroll
    for (int c = 0; c < NC; ++c) acc[r][c] = 0;
  }

  for (std::size_t kt = 0; kt < kend; kt += flash_tile) {
    __syncthreads();  // the previous tile's readers are done
    flash_load(sk, ks, kb, kt, kend, flash_tile, dh);
    flash_load(sv, dh, vb, kt, kend, flash_tile, dh);
    __syncthreads();

    C s[R] = {};
    const C* kr = sk + lane * ks;
    for (int d = 0; d < dh; ++d) {
      const C kd = kr[d];
#pragma unroll
      for (int r = 0; r < R; ++r) s[r] += sq[(warp * R + r) * dh + d] * kd;
    }
    // Online softmax: rescale what the row has by exp(m_old − m_new) and turn scores
    // into exp(s − m_new). Until a row sees a key its max is −inf: exponents are taken
    // against 0 there, so the (all zero) state stays zero rather than NaN.
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const C x = flash_visible(f, qt + warp * R + r, kt + lane) ? scale * s[r] : d_neg_inf<C>();
      const C mt = group<32>::max<C>(x, nullptr);
      const C mn = mt > m[r] ? mt : m[r];
      const C base = mn == d_neg_inf<C>() ? C(0) : mn;
      const C alpha = d_exp(m[r] - base);
      s[r] = d_exp(x - base);
      m[r] = mn;
      l[r] = l[r] * alpha + s[r];
      if constexpr (Drop) s[r] = math::dropout_value(s[r], f.drop_keep(rk[r], feature0 + kt + lane), rs);
#pragma unroll
      for (int c = 0; c < NC; ++c) acc[r][c] *= alpha;
    }
    flash_accumulate(acc, s, sv, dh, dh, lane);
  }

#pragma unroll
  for (int r = 0; r < R; ++r) {
    const C sum = group<32>::sum<C>(l[r], nullptr);  // > 0: every row sees key 0
    const std::size_t i = qt + warp * R + r;
    if (i >= f.q_len) continue;
    flash_store(o + (item * f.q_len + i) * dh, acc[r], C(1) / sum, dh, lane);
    if (lane == 0) lse[item * f.q_len + i] = L(m[r] + d_log(sum));
  }
}

}  // namespace strata::backend::cuda::detail
