// strata-header: cuda-only
#pragma once
// strata CUDA backend, flash attention's backward (backend/attention.hpp:
// flash_attention_backward): the dQ kernel and the dK/dV kernel, on flash.cuh's tiles.
// Each recomputes the probabilities from the forward's lse (and, with dropout, the
// forward's mask from the elements' coordinates); launched by attention.cuh.
#include "strata/backend/cuda/flash.cuh"

namespace strata::backend::cuda::detail {

// Backward, dQ: block of BQ = 4R query rows (R as in dK/dV), looping over the visible
// key tiles of 32 with p = exp(s − lse) recomputed, ds = p (do·v − δ), dq += ds k.
// Shared: Q and dO [BQ][dh], K and V [32][dh | 1]. Dropout: ds = p (m do·v − δ) with the
// forward's mask m drawn again (backend/attention.hpp).
template <class T, class L, int DMAX, bool Drop>
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

  [[maybe_unused]] const std::uint64_t key = flash_step_key<Drop>(f);
  [[maybe_unused]] const std::uint64_t feature0 = Drop ? f.drop_feature0(item) : 0;
  [[maybe_unused]] const C rs = C(f.drop.scale);
  [[maybe_unused]] std::uint64_t rk[Drop ? R : 1];  // the rows' dropout keys
  // Rows past q_len work on zeros (lse 0) and are never written.
  C ls[R], dl[R], acc[R][NC];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const std::size_t i = qt + warp * R + r;
    const bool in = i < f.q_len;
    if constexpr (Drop) rk[r] = f.drop_row_key(key, item, i);
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
      if constexpr (Drop) dp[r] = math::dropout_value(dp[r], f.drop_keep(rk[r], feature0 + kt + lane), rs);
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
// Dropout: lane i hashes its query's row key once per query tile; dv takes m p, ds = p (m dp − δ).
template <class T, class L, int DMAX, bool Drop>
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

  [[maybe_unused]] const std::uint64_t key = flash_step_key<Drop>(f);
  [[maybe_unused]] const C rs = C(f.drop.scale);
  C gk[R][NC], gv[R][NC];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < NC; ++c) gk[r][c] = gv[r][c] = 0;

  // Step t: query tile t mod qtiles (from qstart) of group member t / qtiles.
  const std::size_t qtiles = qstart < f.q_len ? (f.q_len - qstart + flash_tile - 1) / flash_tile : 0;
  for (std::size_t t = 0; t < f.group * qtiles; ++t) {
    const std::size_t it = qstart + t % qtiles * flash_tile, item = f.query_item(kv, t / qtiles), row0 = item * f.q_len;
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
    [[maybe_unused]] std::uint64_t rk = 0, feature0 = 0;  // query i's dropout key, key kt + warp·R's feature
    if constexpr (Drop) rk = f.drop_row_key(key, item, i), feature0 = f.drop_feature0(item) + kt + warp * R;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const bool vis = i < f.q_len && flash_visible(f, i, kt + warp * R + r);
      const C p = vis ? d_exp(scale * s[r] - ls) : C(0);
      if constexpr (Drop) {
        const bool keep = f.drop_keep(rk, feature0 + r);
        s[r] = math::dropout_value(p, keep, rs);                      // m p
        dp[r] = p * (math::dropout_value(dp[r], keep, rs) - dl);  // ds
      } else {
        s[r] = p;                  // p
        dp[r] = p * (dp[r] - dl);  // ds
      }
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

}  // namespace strata::backend::cuda::detail
