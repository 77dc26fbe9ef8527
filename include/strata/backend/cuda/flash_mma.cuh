// strata-header: cuda-only
#pragma once
// strata CUDA backend, flash attention on the tensor cores (backend/attention.hpp:
// flash_attention_forward and backward) for bf16 and f16 at head sizes 64 and 128, the
// sizes models use: the warp-level matrix products (mma.sync m16n8k16, fp32 accumulators)
// that FlashAttention-2 is built on, the fragment loads, and the forward kernel. The
// backward's kernels are in flash_mma_backward.cuh; attention.cuh launches these where
// flash_mma_usable holds and flash.cuh's SIMT kernels elsewhere.
//
// Numerics: scores and sums in fp32 as in flash.cuh; what differs is that the
// probabilities (forward) and the score gradients (backward) are rounded to T once before
// their product with V, K or Q, as FlashAttention does (a relative error of T's rounding
// per term, bounded in the kernel suite).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "strata/backend/cuda/flash.cuh"

namespace strata::backend::cuda::detail {

// ---------------------------------------------------------------------------------------
// Warp-level pieces (sm_80 and later; every use sits under __CUDA_ARCH__ >= 800).
//
// Fragments of mma.m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16"), lane = 4g + c:
// A (16×16, row-major) regs {A[g][2c..], A[g+8][2c..], A[g][8+2c..], A[g+8][8+2c..]};
// B (16×8) regs {B[2c..][g], B[8+2c..][g]}; C (16×8, fp32) {C[g][2c], C[g][2c+1],
// C[g+8][2c], C[g+8][2c+1]}. Two adjacent C tiles of 8 columns are therefore, packed
// pairwise to T, the A fragment of a product over those 16 columns (no shuffles).
// ---------------------------------------------------------------------------------------
inline constexpr int mma_warps = 4;
inline constexpr double mma_log2e = 1.4426950408889634;  // log2(e): scores in the log2 domain

__device__ __forceinline__ std::uint32_t smem_u32(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8×8 matrices of 16-bit elements: lanes 8i..8i+7 give the row addresses of matrix i;
// register i of lane 4g + c holds matrix i's row g, columns 2c and 2c + 1 (trans: its
// column g, rows 2c and 2c + 1).
__device__ __forceinline__ void ldsm_x4(std::uint32_t (&r)[4], std::uint32_t addr) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#endif
}
__device__ __forceinline__ void ldsm_x4_trans(std::uint32_t (&r)[4], std::uint32_t addr) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#endif
}

// d += a·b on one 16×8×16 tile, T = bf16 or f16, fp32 accumulators.
template <class T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                          std::uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, bf16>)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// Two floats rounded (to nearest even) to T, `lo` in the low half (the lower column).
template <class T>
__device__ __forceinline__ std::uint32_t pack2(float lo, float hi) {
  std::uint32_t r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, bf16>)
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
#endif
  return r;
}

// The A fragment of a product over 16 columns from the fp32 C tiles of those columns.
template <class T>
__device__ __forceinline__ void c_to_a(std::uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack2<T>(lo[0], lo[1]);
  a[1] = pack2<T>(lo[2], lo[3]);
  a[2] = pack2<T>(hi[0], hi[1]);
  a[3] = pack2<T>(hi[2], hi[3]);
}

// 16 bytes global -> shared without registers; zero-filled where !valid (src is then
// not read, but must be a mapped address).
__device__ __forceinline__ void cp_async16(std::uint32_t dst, const void* src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
#endif
}
// 4 bytes (a float statistic) global -> shared, zero-filled where !valid.
__device__ __forceinline__ void cp_async4(std::uint32_t dst, const void* src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
__device__ __forceinline__ void cp_async_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group 0;\n" ::);
#endif
}

// rows × D elements of src (rows from `first`; those at or past `end` zero-filled) into a
// shared tile of row stride D + 8: 16 bytes of padding per row put the 8 rows an ldmatrix
// phase reads into 8 different 16-byte bank groups.
template <int D>
inline constexpr int mma_ld = D + 8;
template <int D, class T>
__device__ __forceinline__ void mma_load_tile(std::uint16_t* tile, const T* src, std::size_t first, std::size_t end,
                                              int rows) {
  constexpr int chunks = D / 8;
  for (int e = int(threadIdx.x); e < rows * chunks; e += mma_warps * 32) {
    const int r = e / chunks, ch = e - r * chunks;
    const bool valid = first + r < end;
    cp_async16(smem_u32(tile + r * mma_ld<D> + ch * 8), src + (valid ? first + r : 0) * D + ch * 8, valid);
  }
}

// Key tile `tile` (BN keys from tile·BN; keys at or past `end` zero) of K and V into buffer
// tile mod 2 of the double-buffered shared tiles sk and sv ([2][BN][D+8] each).
template <int D, int BN, class T>
__device__ __forceinline__ void mma_load_kv(std::uint16_t* sk, std::uint16_t* sv, const T* kb, const T* vb,
                                            std::size_t tile, std::size_t end) {
  const int b = int(tile % 2) * BN * mma_ld<D>;
  mma_load_tile<D>(sk + b, kb, tile * BN, end, BN);
  mma_load_tile<D>(sv + b, vb, tile * BN, end, BN);
}

// The A fragment of rows [row0, row0 + 16) × columns [col0, col0 + 16) of a shared tile.
template <int D>
__device__ __forceinline__ void mma_load_a(std::uint32_t (&a)[4], const std::uint16_t* tile, int row0, int col0,
                                           int lane) {
  ldsm_x4(a, smem_u32(tile + (row0 + lane % 16) * mma_ld<D> + col0 + 8 * (lane / 16)));
}
// The B fragments of two 8-column tiles (columns n0.. and n0 + 8..) × k in [k0, k0 + 16),
// B[k][n] = tile[n][k] (the tile holds Bᵀ row-major: keys against a query's features):
// b[0], b[1] for the first tile, b[2], b[3] for the second.
template <int D>
__device__ __forceinline__ void mma_load_bt(std::uint32_t (&b)[4], const std::uint16_t* tile, int n0, int k0,
                                            int lane) {
  ldsm_x4(b, smem_u32(tile + (n0 + lane % 8 + 8 * (lane / 16)) * mma_ld<D> + k0 + 8 * (lane / 8 % 2)));
}
// The same with B[k][n] = tile[k][n] (the tile holds B row-major: values by key).
template <int D>
__device__ __forceinline__ void mma_load_b(std::uint32_t (&b)[4], const std::uint16_t* tile, int k0, int n0,
                                           int lane) {
  ldsm_x4_trans(b, smem_u32(tile + (k0 + lane % 8 + 8 * (lane / 8 % 2)) * mma_ld<D> + n0 + 8 * (lane / 16)));
}

// acc[m][·] += A_m · B over k in [0, K) for a warp's MT row tiles of a shared tile `a`
// (rows arow0 + 16m) and NT column tiles of 8: B's tile holds Bᵀ (mma_load_bt).
template <int D, int MT, int NT, int K, class T>
__device__ __forceinline__ void mma_abt(float (&acc)[MT][NT][4], const std::uint16_t* a, int arow0,
                                        const std::uint16_t* bt, int lane) {
#pragma unroll
  for (int k = 0; k < K; k += 16) {
    std::uint32_t af[MT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m) mma_load_a<D>(af[m], a, arow0 + 16 * m, k, lane);
#pragma unroll
    for (int n = 0; n < NT; n += 2) {
      std::uint32_t b[4];
      mma_load_bt<D>(b, bt, 8 * n, k, lane);
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        mma_16816<T>(acc[m][n], af[m], b[0], b[1]);
        mma_16816<T>(acc[m][n + 1], af[m], b[2], b[3]);
      }
    }
  }
}
// acc[m][·] += P_m · B where P_m (16 × 8KT, in registers as fp32 C tiles) is rounded to T
// and B (8KT × 8NT) is a shared tile held row-major (mma_load_b), rows from k0.
template <int D, int MT, int KT, int NT, class T>
__device__ __forceinline__ void mma_pb(float (&acc)[MT][NT][4], const float (&p)[MT][KT][4], const std::uint16_t* b,
                                       int lane) {
#pragma unroll
  for (int k = 0; k < KT; k += 2) {
    std::uint32_t pa[MT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m) c_to_a<T>(pa[m], p[m][k], p[m][k + 1]);
#pragma unroll
    for (int n = 0; n < NT; n += 2) {
      std::uint32_t bf[4];
      mma_load_b<D>(bf, b, 8 * k, 8 * n, lane);
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        mma_16816<T>(acc[m][n], pa[m], bf[0], bf[1]);
        mma_16816<T>(acc[m][n + 1], pa[m], bf[2], bf[3]);
      }
    }
  }
}

// The max and the sum over the 4 lanes of a quad (the lanes sharing an accumulator row).
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Two adjacent elements of row `row` of a [rows][D] output, at column `col`, rounded to T.
template <int D, class T>
__device__ __forceinline__ void mma_store2(T* out, std::size_t row, int col, float lo, float hi) {
  *reinterpret_cast<std::uint32_t*>(out + row * D + col) = pack2<T>(lo, hi);
}

// How many of the n keys from k0 a row that sees `seen` keys sees (32-bit compares after).
__device__ __forceinline__ int mma_visible(std::size_t seen, std::size_t k0, int n) {
  return seen > k0 ? int(d_min(seen - k0, std::size_t(n))) : 0;
}

// Whether the tensor-core kernels take a call: 16-bit T (float statistics), head size 64
// or 128, 16-byte aligned rows (cp.async, paired stores), and kernels compiled for sm_80 or
// later for this device (their bodies are empty below that: a build for an older
// architecture JIT-compiled on a newer GPU must not take them).
template <class T>
__global__ void k_flash_mma_probe() {}
// Asked once per process (a process drives one device), not on every launch.
template <class T>
bool mma_compiled_for_device() {
  static const bool ok = [] {
    cudaFuncAttributes a{};
    if (cudaFuncGetAttributes(&a, k_flash_mma_probe<T>) != cudaSuccess) {
      (void)cudaGetLastError();  // no image for this device: not ours to report here
      return false;
    }
    return a.ptxVersion >= 80;
  }();
  return ok;
}
// The element types the kernels are written for; callers test it with `if constexpr`, so
// the kernels are never instantiated for float or double (half of a test TU's device code).
template <class T, class L>
inline constexpr bool flash_mma_types = is_half16_v<T> && std::is_same_v<L, float>;
template <class T, class L>
bool flash_mma_usable(const flash_shape& f, std::initializer_list<const void*> ptrs) {
  static_assert(flash_mma_types<T, L>, "flash_mma_usable: ask only where flash_mma_types<T, L> holds");
  if (f.dh != 64 && f.dh != 128) return false;
  for (const void* p : ptrs)
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
  return mma_compiled_for_device<T>();
}
template <class F>
void with_mma_dh(std::size_t dh, F&& f) {
  if (dh == 64)
    f(ic<64>{});
  else
    f(ic<128>{});
}

// ---------------------------------------------------------------------------------------
// Forward. Block: 4 warps, each 16·MT query rows (MT = 2 at D 64, 1 at D 128), of one item
// (the heaviest tiles, the last under causal masking, first); it walks the visible key
// tiles of 64, the next tile's K and V copied (cp.async) while the current one is used.
// Per warp and tile: S = Q Kᵀ (mma), the online softmax on S's fragments in registers
// (running max m and sum l per row, in the log2 domain: x = scale·log2(e)·s), O += P V
// with P rounded to T. Shared: Q [BM][D+8], K and V [2][64][D+8].
// ---------------------------------------------------------------------------------------
template <int D>
struct mma_fwd_cfg {
  static constexpr int MT = D == 64 ? 2 : 1, BM = mma_warps * 16 * MT, BN = 64;
  static constexpr std::size_t smem = std::size_t(BM + 4 * BN) * mma_ld<D> * 2;
};

template <class T, class L, int D, bool Drop>
__global__ void __launch_bounds__(mma_warps * 32)
    k_flash_mma_forward(flash_shape f, float scale_log2, const T* __restrict__ qh, const T* __restrict__ kh,
                        const T* __restrict__ vh, T* __restrict__ o, L* __restrict__ lse) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using cfg = mma_fwd_cfg<D>;
  constexpr int MT = cfg::MT, BM = cfg::BM, BN = cfg::BN, NT = BN / 8, DT = D / 8, LD = mma_ld<D>;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, c = lane % 4;
  auto* sq = reinterpret_cast<std::uint16_t*>(flash_smem);
  std::uint16_t* sk = sq + BM * LD;  // [2][BN][LD]
  std::uint16_t* sv = sk + 2 * BN * LD;

  const std::size_t tiles = (f.q_len + BM - 1) / BM, item = blockIdx.x / tiles;
  const std::size_t qt = (tiles - 1 - blockIdx.x % tiles) * BM;
  const std::size_t kend = f.keys_seen_by(d_min(qt + BM, f.q_len) - 1);  // what the tile's last query sees
  const std::size_t ntiles = (kend + BN - 1) / BN;
  const T* kb = kh + f.kv_item_of(item) * f.k_len * D;
  const T* vb = vh + f.kv_item_of(item) * f.k_len * D;
  mma_load_tile<D>(sq, qh + item * f.q_len * D, qt, f.q_len, BM);
  if (ntiles > 0) mma_load_kv<D, BN>(sk, sv, kb, vb, 0, kend);
  cp_async_commit();

  const int wrow = warp * 16 * MT;  // the warp's first row in the tile
  [[maybe_unused]] const std::uint64_t key = flash_step_key<Drop>(f);
  [[maybe_unused]] const float rs = float(f.drop.scale);
  [[maybe_unused]] const std::uint64_t feature0 = Drop ? f.drop_feature0(item) : 0;
  [[maybe_unused]] std::uint64_t rk[MT][2];
  std::size_t seen[MT][2];
  float m[MT][2], l[MT][2], acc[MT][DT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const std::size_t i = qt + wrow + 16 * mt + g + 8 * h;
      seen[mt][h] = f.keys_seen_by(i);
      if constexpr (Drop) rk[mt][h] = f.drop_row_key(key, item, i);
      m[mt][h] = d_neg_inf<float>();
      l[mt][h] = 0;
    }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][dt][e] = 0;

  for (std::size_t t = 0; t < ntiles; ++t) {
    cp_async_wait_all();
    __syncthreads();  // tile t is in; every warp is done with tile t − 1's buffer
    if (t + 1 < ntiles) mma_load_kv<D, BN>(sk, sv, kb, vb, t + 1, kend);
    cp_async_commit();
    const std::uint16_t* ck = sk + (t % 2) * BN * LD;
    const std::uint16_t* cv = sv + (t % 2) * BN * LD;
    const std::size_t kt = t * BN;

    float s[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0;
    mma_abt<D, MT, NT, D, T>(s, sq, wrow, ck, lane);

    // Online softmax per row (mt, h): elements e = 2h, 2h + 1 of every column tile. Until a
    // row sees a key its max is −inf: exponents are then taken against 0, so its (zero)
    // state stays zero rather than NaN.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int lim = mma_visible(seen[mt][h], kt, BN);
        float mx = d_neg_inf<float>();
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e = 2 * h; e < 2 * h + 2; ++e) {
            const float x = 8 * nt + 2 * c + (e & 1) < lim ? s[mt][nt][e] * scale_log2 : d_neg_inf<float>();
            s[mt][nt][e] = x;
            mx = fmaxf(mx, x);
          }
        const float mn = fmaxf(m[mt][h], quad_max(mx));
        const float base = mn == d_neg_inf<float>() ? 0.f : mn;
        const float alpha = exp2f(m[mt][h] - base);
        float sum = 0;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e = 2 * h; e < 2 * h + 2; ++e) {
            const float p = exp2f(s[mt][nt][e] - base);
            sum += p;
            if constexpr (Drop) {
              const std::size_t j = kt + 8 * nt + 2 * c + (e & 1);
              s[mt][nt][e] = math::dropout_value(p, f.drop_keep(rk[mt][h], feature0 + j), rs);
            } else {
              s[mt][nt][e] = p;
            }
          }
        m[mt][h] = mn;
        l[mt][h] = l[mt][h] * alpha + sum;  // this lane's share of the row's sum
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
          acc[mt][dt][2 * h] *= alpha;
          acc[mt][dt][2 * h + 1] *= alpha;
        }
      }
    mma_pb<D, MT, NT, DT, T>(acc, s, cv, lane);
  }
  cp_async_wait_all();  // a block with no tiles still has its first copies in flight

#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float sum = quad_sum(l[mt][h]);
      const std::size_t i = qt + wrow + 16 * mt + g + 8 * h;
      if (i >= f.q_len) continue;
      const float inv = sum > 0 ? 1.f / sum : 0.f;
      T* orow = o + item * f.q_len * D;
#pragma unroll
      for (int dt = 0; dt < DT; ++dt)
        mma_store2<D>(orow, i, 8 * dt + 2 * c, acc[mt][dt][2 * h] * inv, acc[mt][dt][2 * h + 1] * inv);
      if (c == 0)
        lse[item * f.q_len + i] = L(sum > 0 ? (m[mt][h] + log2f(sum)) * 0.69314718055994531f : d_neg_inf<float>());
    }
#endif
}

}  // namespace strata::backend::cuda::detail
