// strata-header: cuda-only
#pragma once
// strata CUDA backend, attention: the CUDA implementation of backend/attention.hpp
// (layouts and contracts there).
//
// One kernel each, plainly written: the permutations are one thread per element (a
// grid-stride loop over the output, so writes are coalesced); the softmaxes are one
// thread group per score row (launch.cuh's with_row_threads), maxima in compute_t<T>,
// sums in double through the deterministic group reductions of device.cuh. Flash
// attention is three fused tile kernels (forward; backward dQ; backward dK and dV),
// described above them.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "strata/backend/attention.hpp"
#include "strata/backend/cuda/device.cuh"

namespace strata::backend::cuda {

namespace detail {

// The shape of one permutation: token rows [seqs, seq, heads, parts, dh] against
// head-major [parts][seqs, heads, seq, dh].
struct head_layout {
  std::size_t seqs, seq, heads, parts, dh;
  // The offset in the token rows of the element at head-major offset o.
  __device__ std::size_t row_offset(std::size_t o) const {
    const std::size_t d = o % dh;
    std::size_t rest = o / dh;
    const std::size_t t = rest % seq;
    rest /= seq;
    const std::size_t h = rest % heads;
    rest /= heads;
    const std::size_t s = rest % seqs;
    const std::size_t p = rest / seqs;
    return ((s * seq + t) * heads + h) * parts * dh + p * dh + d;
  }
  // The offset in head-major order of the element at token-row offset o.
  __device__ std::size_t head_offset(std::size_t o) const {
    const std::size_t d = o % dh;
    std::size_t rest = o / dh;
    const std::size_t p = rest % parts;
    rest /= parts;
    const std::size_t h = rest % heads;
    rest /= heads;
    const std::size_t t = rest % seq;
    const std::size_t s = rest / seq;
    return p * (seqs * heads * seq * dh) + ((s * heads + h) * seq + t) * dh + d;
  }
  std::size_t size() const { return seqs * seq * heads * parts * dh; }
};

// out[o] = rows[row_offset(o)] for every head-major offset o.
template <class T>
__global__ void k_heads_from_rows(head_layout L, std::size_t n, const T* __restrict__ rows, T* __restrict__ out) {
  for (std::size_t o = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; o < n;
       o += std::size_t(gridDim.x) * blockDim.x)
    out[o] = rows[L.row_offset(o)];
}

// rows[o] = in[head_offset(o)] for every token-row offset o.
template <class T>
__global__ void k_rows_from_heads(head_layout L, std::size_t n, const T* __restrict__ in, T* __restrict__ rows) {
  for (std::size_t o = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; o < n;
       o += std::size_t(gridDim.x) * blockDim.x)
    rows[o] = in[L.head_offset(o)];
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


// ---------------------------------------------------------------------------
// Flash attention (backend/attention.hpp: flash_attention_forward/backward)
// ---------------------------------------------------------------------------
//
// Three kernels of the same shape: 4 warps per block, each warp owning R "rows" (query
// rows in the forward and dQ kernels, key rows in the dK/dV kernel) while its 32 lanes
// walk a tile of 32 partners (keys, resp. queries), one partner per lane. A lane forms
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

// Forward. Block: BQ = 4R query rows of one item (the heaviest tiles, the last under
// causal masking, first); it loops over the visible key tiles of 32 keeping, per row,
// the running max m, each lane's share of the running sum l, and o's columns. Shared:
// Q [BQ][dh], K [32][dh | 1], V [32][dh].
template <class T, class L, int DMAX>
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

  C m[R], l[R], acc[R][NC];
#pragma unroll
  for (int r = 0; r < R; ++r) {
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

// Backward, dQ: block of BQ = 4R query rows (R as in dK/dV), looping over the visible
// key tiles of 32 with p = exp(s − lse) recomputed, ds = p (do·v − δ), dq += ds k.
// Shared: Q and dO [BQ][dh], K and V [32][dh | 1].
template <class T, class L, int DMAX>
__global__ void __launch_bounds__(flash_warps * 32)
    k_flash_backward_dq(flash_shape f, compute_t<T> scale, const T* __restrict__ qh, const T* __restrict__ kh,
                        const T* __restrict__ vh, const T* __restrict__ o, const T* __restrict__ dout,
                        const L* __restrict__ lse, T* __restrict__ dq) {
  using C = compute_t<T>;
  constexpr int R = flash_rows_bwd<C, DMAX>, BQ = flash_warps * R, NC = DMAX / 32;
  const int dh = int(f.dh), ks = dh | 1, warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  C* sq = reinterpret_cast<C*>(flash_smem);
  C* sdo = sq + BQ * dh;
  C* sk = sdo + BQ * dh;
  C* sv = sk + flash_tile * ks;

  const std::size_t tiles = (f.q_len + BQ - 1) / BQ, item = blockIdx.x / tiles;
  const std::size_t qt = (tiles - 1 - blockIdx.x % tiles) * BQ;
  const std::size_t kend = f.keys_seen_by(d_min(qt + BQ, f.q_len) - 1);
  const std::size_t row0 = item * f.q_len;
  const T* kb = kh + f.kv_item_of(item) * f.k_len * dh;
  const T* vb = vh + f.kv_item_of(item) * f.k_len * dh;
  flash_load(sq, dh, qh + row0 * dh, qt, f.q_len, BQ, dh);
  flash_load(sdo, dh, dout + row0 * dh, qt, f.q_len, BQ, dh);
  __syncthreads();

  // Rows past q_len work on zeros (lse 0) and are never written.
  C ls[R], dl[R], acc[R][NC];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const std::size_t i = qt + warp * R + r;
    const bool in = i < f.q_len;
    ls[r] = in ? C(lse[row0 + i]) : C(0);
    dl[r] = flash_delta(sdo + (warp * R + r) * dh, o + (row0 + (in ? i : 0)) * dh, dh, lane);
#pragma unroll
    for (int c = 0; c < NC; ++c) acc[r][c] = 0;
  }

  for (std::size_t kt = 0; kt < kend; kt += flash_tile) {
    __syncthreads();
    flash_load(sk, ks, kb, kt, kend, flash_tile, dh);
    flash_load(sv, ks, vb, kt, kend, flash_tile, dh);
    __syncthreads();

    C s[R] = {}, dp[R] = {};
    const C* kr = sk + lane * ks;
    const C* vr = sv + lane * ks;
    for (int d = 0; d < dh; ++d) {
      const C kd = kr[d], vd = vr[d];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        s[r] += sq[(warp * R + r) * dh + d] * kd;
        dp[r] += sdo[(warp * R + r) * dh + d] * vd;
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const C p = flash_visible(f, qt + warp * R + r, kt + lane) ? d_exp(scale * s[r] - ls[r]) : C(0);
      s[r] = p * (dp[r] - dl[r]);  // ds
    }
    flash_accumulate(acc, s, sk, ks, dh, lane);
  }

#pragma unroll
  for (int r = 0; r < R; ++r) {
    const std::size_t i = qt + warp * R + r;
    if (i < f.q_len) flash_store(dq + (row0 + i) * dh, acc[r], scale, dh, lane);
  }
}

// Backward, dK and dV: block of BK = 4R key rows of one kv item (kept in shared memory
// throughout), looping over the items of its group and, for each, over the query tiles of
// 32 that can see them (causal: from the first query at or after the block's first key):
// a kv head's gradient sums over its query heads in a fixed order, without atomics. Per
// query tile the block loads Q, dO and the rows' lse and δ; lane i takes query i, and
// dv += p do, dk += ds q. Shared: K and V [BK][dh], Q and dO [32][dh | 1], lse and δ [32].
template <class T, class L, int DMAX>
__global__ void __launch_bounds__(flash_warps * 32)
    k_flash_backward_dkdv(flash_shape f, compute_t<T> scale, const T* __restrict__ qh, const T* __restrict__ kh,
                          const T* __restrict__ vh, const T* __restrict__ o, const T* __restrict__ dout,
                          const L* __restrict__ lse, T* __restrict__ dk, T* __restrict__ dv) {
  using C = compute_t<T>;
  constexpr int R = flash_rows_bwd<C, DMAX>, BK = flash_warps * R, NC = DMAX / 32;
  const int dh = int(f.dh), ks = dh | 1, warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  C* sk = reinterpret_cast<C*>(flash_smem);
  C* sv = sk + BK * dh;
  C* sq = sv + BK * dh;
  C* sdo = sq + flash_tile * ks;
  C* sls = sdo + flash_tile * ks;
  C* sdl = sls + flash_tile;

  const std::size_t tiles = (f.k_len + BK - 1) / BK, kv = blockIdx.x / tiles;
  const std::size_t kt = (blockIdx.x % tiles) * BK;  // causal: the first key tiles see the most queries
  const std::size_t key0 = kv * f.k_len;
  flash_load(sk, dh, kh + key0 * dh, kt, f.k_len, BK, dh);
  flash_load(sv, dh, vh + key0 * dh, kt, f.k_len, BK, dh);

  const std::size_t qstart = f.first_query_of(kt) / flash_tile * flash_tile;  // the tile of the first query of key kt

  C gk[R][NC], gv[R][NC];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < NC; ++c) gk[r][c] = gv[r][c] = 0;

  // Step t: query tile t mod qtiles (from qstart) of group member t / qtiles.
  const std::size_t qtiles = qstart < f.q_len ? (f.q_len - qstart + flash_tile - 1) / flash_tile : 0;
  for (std::size_t t = 0; t < f.group * qtiles; ++t) {
    const std::size_t it = qstart + t % qtiles * flash_tile, row0 = f.query_item(kv, t / qtiles) * f.q_len;
    __syncthreads();
    flash_load(sq, ks, qh + row0 * dh, it, f.q_len, flash_tile, dh);
    flash_load(sdo, ks, dout + row0 * dh, it, f.q_len, flash_tile, dh);
    __syncthreads();
    for (int r = warp; r < flash_tile; r += flash_warps) {
      const bool in = it + r < f.q_len;
      const C dl = flash_delta(sdo + r * ks, o + (row0 + (in ? it + r : 0)) * dh, dh, lane);
      if (lane == 0) {
        sls[r] = in ? C(lse[row0 + it + r]) : C(0);
        sdl[r] = dl;
      }
    }
    __syncthreads();

    C s[R] = {}, dp[R] = {};
    const C* qr = sq + lane * ks;
    const C* dor = sdo + lane * ks;
    for (int d = 0; d < dh; ++d) {
      const C qd = qr[d], od = dor[d];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        s[r] += qd * sk[(warp * R + r) * dh + d];
        dp[r] += od * sv[(warp * R + r) * dh + d];
      }
    }
    const std::size_t i = it + lane;
    const C ls = sls[lane], dl = sdl[lane];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const bool vis = i < f.q_len && flash_visible(f, i, kt + warp * R + r);
      s[r] = vis ? d_exp(scale * s[r] - ls) : C(0);  // p
      dp[r] = s[r] * (dp[r] - dl);                    // ds
    }
    flash_accumulate(gv, s, sdo, ks, dh, lane);   // dv += p do
    flash_accumulate(gk, dp, sq, ks, dh, lane);   // dk += ds q
  }

  // Keys no query sees (causal, past the last query) get zeros: written, not skipped.
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const std::size_t j = kt + warp * R + r;
    if (j >= f.k_len) continue;
    flash_store(dk + (key0 + j) * dh, gk[r], scale, dh, lane);
    flash_store(dv + (key0 + j) * dh, gv[r], C(1), dh, lane);
  }
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

}  // namespace detail

// Static members on arguments the front has checked (impl::attention_kernels<queue>).
struct attention_kernels {
  template <class T>
  static void heads_from_rows(queue& q, std::size_t seqs, std::size_t seq, std::size_t heads, std::size_t parts,
                              std::size_t dh, const T* rows, T* out) {
    const detail::head_layout L{seqs, seq, heads, parts, dh};
    const std::size_t n = L.size();
    detail::k_heads_from_rows<T><<<detail::flat_grid(q, n), detail::flat_threads, 0, q.stream()>>>(L, n, rows, out);
    STRATA_CUDA_CHECK_LAUNCH("k_heads_from_rows");
  }

  template <class T>
  static void rows_from_heads(queue& q, std::size_t seqs, std::size_t seq, std::size_t heads, std::size_t parts,
                              std::size_t dh, const T* in, T* rows) {
    const detail::head_layout L{seqs, seq, heads, parts, dh};
    const std::size_t n = L.size();
    detail::k_rows_from_heads<T><<<detail::flat_grid(q, n), detail::flat_threads, 0, q.stream()>>>(L, n, in, rows);
    STRATA_CUDA_CHECK_LAUNCH("k_rows_from_heads");
  }

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
    using C = detail::compute_t<T>;
    detail::with_flash_dh("flash_attention_forward", f.dh, [&](auto dmax) {
      constexpr int DMAX = decltype(dmax)::value, BQ = detail::flash_warps * detail::flash_rows<C, DMAX>;
      const std::size_t ks = f.dh | 1;
      const std::size_t smem = (BQ * f.dh + detail::flash_tile * (ks + f.dh)) * sizeof(C);
      const unsigned grid = detail::flash_grid("flash_attention_forward", f.items, f.q_len, BQ);
      auto* kernel = detail::k_flash_forward<T, L, DMAX>;
      detail::flash_smem_optin(kernel, smem);
      kernel<<<grid, detail::flash_warps * 32, smem, q.stream()>>>(f, C(f.scale), qh, kh, vh, o, lse);
    });
    STRATA_CUDA_CHECK_LAUNCH("k_flash_forward");
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
  // dK and dV per key tile of a kv item (δ recomputed by both: no scratch, no atomics).
  template <class T, class L>
  static void flash_attention_backward(queue& q, const flash_shape& f, const T* qh, const T* kh, const T* vh,
                                       const T* o, const T* dout, const L* lse, T* dq, T* dk, T* dv) {
    using C = detail::compute_t<T>;
    detail::with_flash_dh("flash_attention_backward", f.dh, [&](auto dmax) {
      constexpr int DMAX = decltype(dmax)::value, B = detail::flash_warps * detail::flash_rows_bwd<C, DMAX>;
      constexpr int T32 = detail::flash_tile;
      const std::size_t ks = f.dh | 1;
      const C scale = C(f.scale);

      const std::size_t smem_dq = (2 * B * f.dh + 2 * T32 * ks) * sizeof(C);
      const unsigned grid_dq = detail::flash_grid("flash_attention_backward", f.items, f.q_len, B);
      auto* kdq = detail::k_flash_backward_dq<T, L, DMAX>;
      detail::flash_smem_optin(kdq, smem_dq);
      kdq<<<grid_dq, detail::flash_warps * 32, smem_dq, q.stream()>>>(f, scale, qh, kh, vh, o, dout, lse, dq);
      STRATA_CUDA_CHECK_LAUNCH("k_flash_backward_dq");

      const std::size_t smem_kv = (2 * B * f.dh + 2 * T32 * ks + 2 * T32) * sizeof(C);
      const unsigned grid_kv = detail::flash_grid("flash_attention_backward", f.kv_items(), f.k_len, B);
      auto* kkv = detail::k_flash_backward_dkdv<T, L, DMAX>;
      detail::flash_smem_optin(kkv, smem_kv);
      kkv<<<grid_kv, detail::flash_warps * 32, smem_kv, q.stream()>>>(f, scale, qh, kh, vh, o, dout, lse, dk, dv);
      STRATA_CUDA_CHECK_LAUNCH("k_flash_backward_dkdv");
    });
  }
};

}  // namespace strata::backend::cuda

namespace strata::backend::impl {
template <>
struct attention_kernels<cuda::queue> : cuda::attention_kernels {};
}  // namespace strata::backend::impl
