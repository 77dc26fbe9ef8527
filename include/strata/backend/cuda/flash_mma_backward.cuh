// strata-header: cuda-only
#pragma once
// strata CUDA backend, flash attention's backward on the tensor cores (flash_mma.cuh's
// pieces; launched by attention.cuh where flash_mma_usable holds): a dQ kernel and a dK/dV
// kernel, each output written by one block in a fixed order (no atomics), as
// flash_backward.cuh's SIMT kernels do. Both recompute the probabilities from the
// forward's lse, p = exp(scale·s − lse), and with dropout the forward's mask from the
// elements' coordinates; ds = p (m·dp − δ) with δ = do·o per query row (k_flash_mma_delta,
// into the queue's workspace).
#include "strata/backend/cuda/flash_mma.cuh"

namespace strata::backend::cuda::detail {

// δ[r] = do[r]·o[r] in fp32 for every query row, once, before the two kernels (which read
// it per row and per tile): 8 lanes per row, 16-byte loads.
template <class T, int D>
__global__ void __launch_bounds__(256)
    k_flash_mma_delta(std::size_t rows, const T* __restrict__ o, const T* __restrict__ dout,
                      float* __restrict__ delta) {
  const std::size_t t = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x, r = t / 8;
  const int l = int(t % 8);
  float s = 0;
  if (r < rows)
    for (int ch = l; ch < D / 8; ch += 8) {
      const uint4 a = *reinterpret_cast<const uint4*>(o + r * D + ch * 8);
      const uint4 b = *reinterpret_cast<const uint4*>(dout + r * D + ch * 8);
      const T* x = reinterpret_cast<const T*>(&a);
      const T* y = reinterpret_cast<const T*>(&b);
#pragma unroll
      for (int k = 0; k < 8; ++k) s += float(x[k]) * float(y[k]);
    }
  s += __shfl_xor_sync(0xffffffffu, s, 4);
  s += __shfl_xor_sync(0xffffffffu, s, 2);
  s += __shfl_xor_sync(0xffffffffu, s, 1);
  if (r < rows && l == 0) delta[r] = s;
}

// ---------------------------------------------------------------------------------------
// dQ. Block: 4 warps × 16 query rows of one item, walking the visible key tiles (64 keys at
// D 64, 32 at D 128, for registers), the next tile's K and V copied while the current is
// used. Per tile: S = Q Kᵀ, dP = dO Vᵀ, dS = P ∘ (dP − δ) in registers, dQ += dS K with dS
// rounded to T. Shared: Q, dO
// [64][D+8], K, V [2][BN][D+8].
// ---------------------------------------------------------------------------------------
template <int D>
struct mma_dq_cfg {
  static constexpr int BM = mma_warps * 16, BN = D == 64 ? 64 : 32;
  static constexpr std::size_t smem = std::size_t(2 * BM + 4 * BN) * mma_ld<D> * 2;
};

template <class T, class L, int D, bool Drop>
__global__ void __launch_bounds__(mma_warps * 32)
    k_flash_mma_backward_dq(flash_shape f, float scale_log2, float scale, const T* __restrict__ qh,
                            const T* __restrict__ kh, const T* __restrict__ vh, const T* __restrict__ dout,
                            const L* __restrict__ lse, const float* __restrict__ delta, T* __restrict__ dq) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using cfg = mma_dq_cfg<D>;
  constexpr int BM = cfg::BM, BN = cfg::BN, NT = BN / 8, DT = D / 8, LD = mma_ld<D>;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, c = lane % 4;
  auto* sq = reinterpret_cast<std::uint16_t*>(flash_smem);
  std::uint16_t* sdo = sq + BM * LD;
  std::uint16_t* sk = sdo + BM * LD;  // [2][BN][LD]
  std::uint16_t* sv = sk + 2 * BN * LD;

  const std::size_t tiles = (f.q_len + BM - 1) / BM, item = blockIdx.x / tiles;
  const std::size_t qt = (tiles - 1 - blockIdx.x % tiles) * BM;
  const std::size_t kend = f.keys_seen_by(d_min(qt + BM, f.q_len) - 1);
  const std::size_t ntiles = (kend + BN - 1) / BN, row0 = item * f.q_len;
  const T* kb = kh + f.kv_item_of(item) * f.k_len * D;
  const T* vb = vh + f.kv_item_of(item) * f.k_len * D;
  mma_load_tile<D>(sq, qh + row0 * D, qt, f.q_len, BM);
  mma_load_tile<D>(sdo, dout + row0 * D, qt, f.q_len, BM);
  if (ntiles > 0) mma_load_kv<D, BN>(sk, sv, kb, vb, 0, kend);
  cp_async_commit();

  const int wrow = warp * 16;
  [[maybe_unused]] const std::uint64_t key = flash_step_key<Drop>(f);
  [[maybe_unused]] const std::uint64_t feature0 = Drop ? f.drop_feature0(item) : 0;
  [[maybe_unused]] const float rs = float(f.drop.scale);
  [[maybe_unused]] std::uint64_t rk[2];
  // Rows past q_len work on zeros (lse 0, δ 0) and are never written.
  std::size_t seen[2];
  float ls[2], dl[2], acc[1][DT][4];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const std::size_t i = qt + wrow + g + 8 * h;
    const bool in = i < f.q_len;
    seen[h] = in ? f.keys_seen_by(i) : 0;
    if constexpr (Drop) rk[h] = f.drop_row_key(key, item, i);
    ls[h] = in ? float(lse[row0 + i]) * float(mma_log2e) : 0.f;
    dl[h] = in ? delta[row0 + i] : 0.f;
  }
#pragma unroll
  for (int dt = 0; dt < DT; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[0][dt][e] = 0;

  for (std::size_t t = 0; t < ntiles; ++t) {
    cp_async_wait_all();
    __syncthreads();
    if (t + 1 < ntiles) mma_load_kv<D, BN>(sk, sv, kb, vb, t + 1, kend);
    cp_async_commit();
    const std::uint16_t* ck = sk + (t % 2) * BN * LD;
    const std::uint16_t* cv = sv + (t % 2) * BN * LD;
    const std::size_t kt = t * BN;

    float s[1][NT][4], dp[1][NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[0][nt][e] = dp[0][nt][e] = 0;
    mma_abt<D, 1, NT, D, T>(s, sq, wrow, ck, lane);
    mma_abt<D, 1, NT, D, T>(dp, sdo, wrow, cv, lane);

#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int lim = mma_visible(seen[h], kt, BN);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) {
          const int col = 8 * nt + 2 * c + (e & 1);
          const float p = col < lim ? exp2f(s[0][nt][e] * scale_log2 - ls[h]) : 0.f;
          float dpv = dp[0][nt][e];
          if constexpr (Drop)
            dpv = math::dropout_value(dpv, f.drop_keep(rk[h], feature0 + kt + col), rs);
          s[0][nt][e] = p * (dpv - dl[h]);  // ds
        }
    }
    mma_pb<D, 1, NT, DT, T>(acc, s, ck, lane);
  }
  cp_async_wait_all();  // a block with no tiles still has its first copies in flight

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const std::size_t i = qt + wrow + g + 8 * h;
    if (i >= f.q_len) continue;
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
      mma_store2<D>(dq + row0 * D, i, 8 * dt + 2 * c, scale * acc[0][dt][2 * h], scale * acc[0][dt][2 * h + 1]);
  }
#endif
}

// ---------------------------------------------------------------------------------------
// dK and dV. Block: 4 warps × 16 key rows of one kv item (K and V kept in shared memory),
// looping over the items of its group and, for each, over the query tiles (64 at D 64, 32
// at D 128) that can see them (causal: from the tile of the first query at or after the
// block's first key): a kv head's gradient sums over its query heads in a fixed order.
// The next step's Q, dO and its rows' lse and δ are copied (cp.async) while the current
// step runs. Per step: Sᵀ = K Qᵀ, dPᵀ = V dOᵀ, Pᵀ and dSᵀ in registers,
// dV += Pᵀ dO (with dropout m·P), dK += dSᵀ Q, both rounded to T. Shared: K, V [64][D+8],
// Q, dO [2][BQ][D+8], lse and δ [2][BQ] (cp.async too).
// ---------------------------------------------------------------------------------------
template <int D>
struct mma_kv_cfg {
  static constexpr int BK = mma_warps * 16, BQ = D == 64 ? 64 : 32;
  static constexpr std::size_t smem = std::size_t(2 * BK + 4 * BQ) * mma_ld<D> * 2 + 4 * BQ * sizeof(float);
};

template <class T, class L, int D, bool Drop>
__global__ void __launch_bounds__(mma_warps * 32)
    k_flash_mma_backward_dkdv(flash_shape f, float scale_log2, float scale, const T* __restrict__ qh,
                              const T* __restrict__ kh, const T* __restrict__ vh, const T* __restrict__ dout,
                              const L* __restrict__ lse, const float* __restrict__ delta, T* __restrict__ dk,
                              T* __restrict__ dv) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using cfg = mma_kv_cfg<D>;
  constexpr int BK = cfg::BK, BQ = cfg::BQ, NQ = BQ / 8, DT = D / 8, LD = mma_ld<D>;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, c = lane % 4;
  auto* sk = reinterpret_cast<std::uint16_t*>(flash_smem);
  std::uint16_t* sv = sk + BK * LD;
  std::uint16_t* sq = sv + BK * LD;    // [2][BQ][LD]
  std::uint16_t* sdo = sq + 2 * BQ * LD;  // [2][BQ][LD]
  float* sls = reinterpret_cast<float*>(sdo + 2 * BQ * LD);  // [2][BQ]
  float* sdl = sls + 2 * BQ;                                 // [2][BQ]

  const std::size_t tiles = (f.k_len + BK - 1) / BK, kv = blockIdx.x / tiles;
  const std::size_t kt = (blockIdx.x % tiles) * BK;  // causal: the first key tiles see the most queries
  const std::size_t key0 = kv * f.k_len;
  mma_load_tile<D>(sk, kh + key0 * D, kt, f.k_len, BK);
  mma_load_tile<D>(sv, vh + key0 * D, kt, f.k_len, BK);

  const std::size_t qstart = f.first_query_of(kt) / BQ * BQ;
  const std::size_t qtiles = qstart < f.q_len ? (f.q_len - qstart + BQ - 1) / BQ : 0, steps = f.group * qtiles;
  // Step u: query tile u mod qtiles (from qstart) of group member u / qtiles, into buffer b.
  auto fetch = [&](std::size_t u, int b) {
    const std::size_t it = qstart + u % qtiles * BQ, row0 = f.query_item(kv, u / qtiles) * f.q_len;
    mma_load_tile<D>(sq + b * BQ * LD, qh + row0 * D, it, f.q_len, BQ);
    mma_load_tile<D>(sdo + b * BQ * LD, dout + row0 * D, it, f.q_len, BQ);
    for (int r = int(threadIdx.x); r < BQ; r += mma_warps * 32) {
      const bool in = it + r < f.q_len;
      const std::size_t at = row0 + (in ? it + r : 0);
      cp_async4(smem_u32(sls + b * BQ + r), lse + at, in);
      cp_async4(smem_u32(sdl + b * BQ + r), delta + at, in);
    }
  };
  if (steps > 0) fetch(0, 0);
  cp_async_commit();

  const int wrow = warp * 16;
  [[maybe_unused]] const std::uint64_t key = flash_step_key<Drop>(f);
  [[maybe_unused]] const float rs = float(f.drop.scale);
  float gk[1][DT][4], gv[1][DT][4];
#pragma unroll
  for (int dt = 0; dt < DT; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) gk[0][dt][e] = gv[0][dt][e] = 0;

  for (std::size_t t = 0; t < steps; ++t) {
    cp_async_wait_all();
    __syncthreads();  // step t's tiles and statistics are in; step t − 1's readers are done
    if (t + 1 < steps) fetch(t + 1, int((t + 1) % 2));
    cp_async_commit();
    const int b = int(t % 2);
    const std::uint16_t* cq = sq + b * BQ * LD;
    const std::uint16_t* cdo = sdo + b * BQ * LD;
    const std::size_t it = qstart + t % qtiles * BQ, item = f.query_item(kv, t / qtiles);

    float s[1][NQ][4], dp[1][NQ][4];
#pragma unroll
    for (int nt = 0; nt < NQ; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[0][nt][e] = dp[0][nt][e] = 0;
    mma_abt<D, 1, NQ, D, T>(s, sk, wrow, cq, lane);   // Sᵀ = K Qᵀ
    mma_abt<D, 1, NQ, D, T>(dp, sv, wrow, cdo, lane);  // dPᵀ = V dOᵀ

    [[maybe_unused]] const std::uint64_t feature0 = Drop ? f.drop_feature0(item) : 0;
    // every query of the step sees every key of the block: no per-element mask
    const bool full = it + BQ <= f.q_len && kt + BK <= f.k_len && f.keys_seen_by(it) >= kt + BK;
#pragma unroll
    for (int nt = 0; nt < NQ; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = 8 * nt + 2 * c + (e & 1);
        const std::size_t i = it + qi, j = kt + wrow + g + 8 * (e / 2);
        const bool vis = full || (i < f.q_len && j < f.keys_seen_by(i));
        const float p = vis ? exp2f(s[0][nt][e] * scale_log2 - sls[b * BQ + qi] * float(mma_log2e)) : 0.f;
        if constexpr (Drop) {
          const bool keep = f.drop_keep(f.drop_row_key(key, item, i), feature0 + j);
          s[0][nt][e] = math::dropout_value(p, keep, rs);                                  // m p
          dp[0][nt][e] = p * (math::dropout_value(dp[0][nt][e], keep, rs) - sdl[b * BQ + qi]);  // ds
        } else {
          s[0][nt][e] = p;
          dp[0][nt][e] = p * (dp[0][nt][e] - sdl[b * BQ + qi]);
        }
      }
    mma_pb<D, 1, NQ, DT, T>(gv, s, cdo, lane);  // dV += Pᵀ dO
    mma_pb<D, 1, NQ, DT, T>(gk, dp, cq, lane);  // dK += dSᵀ Q
  }
  cp_async_wait_all();  // a block with no tiles still has its first copies in flight

  // Keys no query sees (causal, past the last query) get zeros: written, not skipped.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const std::size_t j = kt + wrow + g + 8 * h;
    if (j >= f.k_len) continue;
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) {
      mma_store2<D>(dk + key0 * D, j, 8 * dt + 2 * c, scale * gk[0][dt][2 * h], scale * gk[0][dt][2 * h + 1]);
      mma_store2<D>(dv + key0 * D, j, 8 * dt + 2 * c, gv[0][dt][2 * h], gv[0][dt][2 * h + 1]);
    }
  }
#endif
}

}  // namespace strata::backend::cuda::detail
