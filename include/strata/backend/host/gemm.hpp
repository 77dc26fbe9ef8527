// strata host backend: row-major GEMM, C = alpha * op(A) * op(B) + beta * C.
//
// Structure (Goto/BLIS): loop over NC-wide column panels of C and KC-deep
// slices of K; pack the op(B) slice into NR-wide slivers once (shared by all
// threads), then each task packs an MC-tall block of op(A) into MR-tall slivers
// and runs an MR x NR register-tile micro-kernel over its part of the panel.
//
// Determinism: block sizes are compile-time constants, every element of C is
// produced by exactly one task, and its value depends only on its own k-order
// sum within each KC slice (lanes never mix), so results are bit-identical for
// every thread count. They may differ between SIMD paths (FMA vs mul+add).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "host.hpp"
#include "strata/backend/bf16.hpp"

namespace strata::backend {

// op(X) for gemm. Shared by all backends (maps to CUBLAS_OP_N / CUBLAS_OP_T).
enum class trans : unsigned char { N, T };

}  // namespace strata::backend

#if defined(__GNUC__) || defined(__clang__)
#define STRATA_HOST_VECTOR_EXT 1
#define STRATA_HOST_ALWAYS_INLINE [[gnu::always_inline]] inline
#define STRATA_HOST_RESTRICT __restrict__
#else
#define STRATA_HOST_VECTOR_EXT 0
#define STRATA_HOST_ALWAYS_INLINE inline
#define STRATA_HOST_RESTRICT
#endif

// Full unrolling keeps the accumulator tile in registers even at -O2. nvcc's
// front end does not know this pragma (and host speed under nvcc is moot).
#if defined(__GNUC__) && !defined(__CUDACC__)
#define STRATA_HOST_PRAGMA(x) _Pragma(#x)
#define STRATA_HOST_UNROLL(n) STRATA_HOST_PRAGMA(GCC unroll n)
#else
#define STRATA_HOST_UNROLL(n)
#endif

// Run-time dispatch to AVX2/AVX-512 micro-kernels on x86 with GCC/Clang, so
// a binary built for plain x86-64 (no -march flags) still runs at full speed.
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(STRATA_HOST_NO_DISPATCH)
#define STRATA_HOST_X86_DISPATCH 1
#define STRATA_HOST_TARGET(isa) __attribute__((target(isa)))
#else
#define STRATA_HOST_X86_DISPATCH 0
#endif

namespace strata::backend::host {

namespace detail {

// ---------------------------------------------------------------------------
// Micro-kernel: acc[i][j] = sum_k a[k*MR + i] * b[k*NR + j], k = 0..kc-1 in
// order, then c[i*ldc + j] = alpha*acc + beta*c (c not read when beta == 0).
// Written once with GCC/Clang vector extensions (VB = vector bytes); each
// instantiation is compiled inside a function whose target attribute selects
// the instruction set, so the same source yields SSE2, AVX2+FMA and AVX-512
// code. Vectors never cross a function boundary (no ABI issues). The merge
// into C happens here, in registers, because a separate scalar pass over C
// cost a third of the run time.
// ---------------------------------------------------------------------------
#if STRATA_HOST_VECTOR_EXT
template <class T, std::size_t VB>
struct simd_vec {
  typedef T type __attribute__((vector_size(VB)));
};

template <class T, std::size_t MR, std::size_t NR, std::size_t VB>
STRATA_HOST_ALWAYS_INLINE void micro_tile(std::size_t kc, const T* STRATA_HOST_RESTRICT a,
                                          const T* STRATA_HOST_RESTRICT b, T* STRATA_HOST_RESTRICT c, std::size_t ldc,
                                          T alpha, T beta) {
  using V = typename simd_vec<T, VB>::type;
  constexpr std::size_t W = VB / sizeof(T);
  constexpr std::size_t NV = NR / W;
  static_assert(NR % W == 0, "NR must be a whole number of vectors");
  V acc[MR][NV];
  STRATA_HOST_UNROLL(32)
  for (std::size_t i = 0; i < MR; ++i) {
    STRATA_HOST_UNROLL(8)
    for (std::size_t j = 0; j < NV; ++j) acc[i][j] = V{};
  }
  for (std::size_t k = 0; k < kc; ++k) {
    V bv[NV];
    STRATA_HOST_UNROLL(8)
    for (std::size_t j = 0; j < NV; ++j) std::memcpy(&bv[j], b + k * NR + j * W, sizeof(V));
    STRATA_HOST_UNROLL(32)
    for (std::size_t i = 0; i < MR; ++i) {
      // s - 0 is an exact broadcast (s + 0 would not be: -0 + 0 = +0), so
      // the compiler emits a plain broadcast.
      const V av = a[k * MR + i] - V{};
      STRATA_HOST_UNROLL(8)
      for (std::size_t j = 0; j < NV; ++j) acc[i][j] += av * bv[j];
    }
  }
  const V va = alpha - V{};
  if (beta == T(0)) {
    STRATA_HOST_UNROLL(32)
    for (std::size_t i = 0; i < MR; ++i) {
      STRATA_HOST_UNROLL(8)
      for (std::size_t j = 0; j < NV; ++j) {
        const V r = va * acc[i][j];
        std::memcpy(c + i * ldc + j * W, &r, sizeof(V));
      }
    }
  } else {
    const V vb = beta - V{};
    STRATA_HOST_UNROLL(32)
    for (std::size_t i = 0; i < MR; ++i) {
      STRATA_HOST_UNROLL(8)
      for (std::size_t j = 0; j < NV; ++j) {
        V cv;
        std::memcpy(&cv, c + i * ldc + j * W, sizeof(V));
        const V r = va * acc[i][j] + vb * cv;
        std::memcpy(c + i * ldc + j * W, &r, sizeof(V));
      }
    }
  }
}
#else
template <class T, std::size_t MR, std::size_t NR, std::size_t VB>
inline void micro_tile(std::size_t kc, const T* a, const T* b, T* c, std::size_t ldc, T alpha, T beta) {
  T acc[MR][NR] = {};
  for (std::size_t k = 0; k < kc; ++k)
    for (std::size_t i = 0; i < MR; ++i)
      for (std::size_t j = 0; j < NR; ++j) acc[i][j] += a[k * MR + i] * b[k * NR + j];
  for (std::size_t i = 0; i < MR; ++i)
    for (std::size_t j = 0; j < NR; ++j)
      c[i * ldc + j] = beta == T(0) ? alpha * acc[i][j] : alpha * acc[i][j] + beta * c[i * ldc + j];
}
#endif

template <class T>
using micro_kernel_fn = void (*)(std::size_t, const T*, const T*, T*, std::size_t, T, T);

// Baseline: 16-byte vectors (SSE2 on x86-64, NEON on AArch64), 6x8 floats /
// 6x4 doubles = 12 accumulators, leaving registers for B, A and a product.
inline void uk_base_f32(std::size_t kc, const float* a, const float* b, float* c, std::size_t ldc, float alpha,
                        float beta) {
  micro_tile<float, 6, 8, 16>(kc, a, b, c, ldc, alpha, beta);
}
inline void uk_base_f64(std::size_t kc, const double* a, const double* b, double* c, std::size_t ldc, double alpha,
                        double beta) {
  micro_tile<double, 6, 4, 16>(kc, a, b, c, ldc, alpha, beta);
}
#if STRATA_HOST_X86_DISPATCH
// AVX2+FMA: 6x16 floats = 12 ymm accumulators + 2 B vectors + 1 broadcast.
STRATA_HOST_TARGET("avx2,fma")
inline void uk_avx2_f32(std::size_t kc, const float* a, const float* b, float* c, std::size_t ldc, float alpha,
                        float beta) {
  micro_tile<float, 6, 16, 32>(kc, a, b, c, ldc, alpha, beta);
}
STRATA_HOST_TARGET("avx2,fma")
inline void uk_avx2_f64(std::size_t kc, const double* a, const double* b, double* c, std::size_t ldc, double alpha,
                        double beta) {
  micro_tile<double, 6, 8, 32>(kc, a, b, c, ldc, alpha, beta);
}
// AVX-512: 32 zmm registers allow 12x32 floats = 24 accumulators.
STRATA_HOST_TARGET("avx512f")
inline void uk_avx512_f32(std::size_t kc, const float* a, const float* b, float* c, std::size_t ldc, float alpha,
                          float beta) {
  micro_tile<float, 12, 32, 64>(kc, a, b, c, ldc, alpha, beta);
}
STRATA_HOST_TARGET("avx512f")
inline void uk_avx512_f64(std::size_t kc, const double* a, const double* b, double* c, std::size_t ldc, double alpha,
                          double beta) {
  micro_tile<double, 12, 16, 64>(kc, a, b, c, ldc, alpha, beta);
}
#endif

// Block sizes: the A block (MC x KC) stays in L2, a B sliver (KC x NR) in L1,
// the B panel (KC x NC) in L3. Multiples of MR / NR respectively.
template <class T, std::size_t MR_, std::size_t NR_, micro_kernel_fn<T> K>
struct gemm_config {
  static constexpr std::size_t MR = MR_;
  static constexpr std::size_t NR = NR_;
  static constexpr std::size_t KC = 256;
  static constexpr std::size_t MC = MR_ * (sizeof(T) == 4 ? 24 : 16);
  static constexpr std::size_t NC = NR_ * (3072 / NR_);
  static void kernel(std::size_t kc, const T* a, const T* b, T* c, std::size_t ldc, T alpha, T beta) {
    K(kc, a, b, c, ldc, alpha, beta);
  }
};

// Grow-only per-thread scratch, so repeated GEMMs do not re-fault fresh pages.
template <class T, int Slot>
inline T* scratch(std::size_t n) {
  thread_local buffer<T> buf;
  if (buf.size() < n) buf = buffer<T>(n);
  return buf.data();
}

// op(A)(i, k) for i in [i0, i0+mc), k in [k0, k0+kc) -> MR-tall slivers,
// each k-major: ap[s*MR*kc + k*MR + r]. Rows past mc are zero so the
// micro-kernel always runs full tiles.
template <class T, std::size_t MR>
inline void pack_a(trans ta, const T* A, std::size_t lda, std::size_t i0, std::size_t mc, std::size_t k0,
                   std::size_t kc, T* ap) {
  for (std::size_t s = 0; s * MR < mc; ++s) {
    const std::size_t rows = std::min(MR, mc - s * MR);
    T* dst = ap + s * MR * kc;
    if (ta == trans::N) {
      for (std::size_t r = 0; r < rows; ++r) {
        const T* src = A + (i0 + s * MR + r) * lda + k0;
        for (std::size_t k = 0; k < kc; ++k) dst[k * MR + r] = src[k];
      }
    } else {
      for (std::size_t k = 0; k < kc; ++k) {
        const T* src = A + (k0 + k) * lda + i0 + s * MR;
        for (std::size_t r = 0; r < rows; ++r) dst[k * MR + r] = src[r];
      }
    }
    if (rows < MR)
      for (std::size_t k = 0; k < kc; ++k)
        for (std::size_t r = rows; r < MR; ++r) dst[k * MR + r] = T(0);
  }
}

// op(B)(k, j) for k in [k0, k0+kc), j in slivers [s0, s1) of the panel
// starting at column j0 -> bp[s*NR*kc + k*NR + c]; columns past nc are zero.
template <class T, std::size_t NR>
inline void pack_b(trans tb, const T* B, std::size_t ldb, std::size_t k0, std::size_t kc, std::size_t j0,
                   std::size_t nc, std::size_t s0, std::size_t s1, T* bp) {
  for (std::size_t s = s0; s < s1; ++s) {
    const std::size_t cols = std::min(NR, nc - s * NR);
    T* dst = bp + s * NR * kc;
    if (tb == trans::N) {
      for (std::size_t k = 0; k < kc; ++k) {
        const T* src = B + (k0 + k) * ldb + j0 + s * NR;
        std::size_t c = 0;
        for (; c < cols; ++c) dst[k * NR + c] = src[c];
        for (; c < NR; ++c) dst[k * NR + c] = T(0);
      }
    } else {
      for (std::size_t c = 0; c < cols; ++c) {
        const T* src = B + (j0 + s * NR + c) * ldb + k0;
        for (std::size_t k = 0; k < kc; ++k) dst[k * NR + c] = src[k];
      }
      for (std::size_t k = 0; k < kc; ++k)
        for (std::size_t c = cols; c < NR; ++c) dst[k * NR + c] = T(0);
    }
  }
}

// Start pulling the C tile's rows into cache while the micro-kernel runs:
// they are ldc apart, which hardware prefetchers do not follow.
template <class T>
inline void prefetch_tile(const T* c, std::size_t mr, std::size_t nr, std::size_t ldc) {
#if defined(__GNUC__) || defined(__clang__)
  for (std::size_t i = 0; i < mr; ++i) {
    const T* row = c + i * ldc;
    for (std::size_t off = 0; off < nr * sizeof(T); off += 64)
      __builtin_prefetch(reinterpret_cast<const char*>(row) + off, 1, 3);
    __builtin_prefetch(reinterpret_cast<const char*>(row + nr - 1), 1, 3);
  }
#else
  (void)c, (void)mr, (void)nr, (void)ldc;
#endif
}

template <class Cfg, class T>
void gemm_blocked(queue& q, trans ta, trans tb, std::size_t M, std::size_t N, std::size_t K, T alpha, const T* A,
                  std::size_t lda, const T* B, std::size_t ldb, T beta, T* C, std::size_t ldc) {
  constexpr std::size_t MR = Cfg::MR, NR = Cfg::NR;
  constexpr std::size_t MC = Cfg::MC, KC = Cfg::KC, NC = Cfg::NC;
  const std::size_t kc_max = std::min(KC, K);
  const std::size_t panel_slivers = (std::min(NC, N) + NR - 1) / NR;
  // The caller's thread owns the packed B panel for the whole call.
  T* bp = scratch<T, 0>(panel_slivers * NR * kc_max);
  const std::size_t m_blocks = (M + MC - 1) / MC;
  // Below ~2M multiply-adds waking the pool costs more than it saves. (The
  // split never changes results, so this is purely a speed choice.)
  const bool parallel = q.threads() > 1 && double(M) * double(N) * double(K) >= double(1 << 21);
  const unsigned threads = parallel ? q.threads() : 1u;
  auto pfor = [&](std::size_t tasks, auto&& f) {
    if (parallel)
      q.parallel_for(tasks, f);
    else
      for (std::size_t t = 0; t < tasks; ++t) f(t);
  };

  for (std::size_t j0 = 0; j0 < N; j0 += NC) {
    const std::size_t nc = std::min(NC, N - j0);
    const std::size_t slivers = (nc + NR - 1) / NR;
    // Split the panel's columns into groups so that small-M problems still
    // produce enough tasks to keep every thread busy (A is re-packed per
    // group, a cost of ~1/(2*group width) per flop).
    std::size_t groups = 1;
    if (threads > 1) {
      const std::size_t want = 4 * std::size_t(threads);
      groups = std::min(slivers, (want + m_blocks - 1) / m_blocks);
      groups = std::max<std::size_t>(groups, 1);
    }
    for (std::size_t k0 = 0; k0 < K; k0 += KC) {
      const std::size_t kc = std::min(KC, K - k0);
      const bool first = (k0 == 0);
      constexpr std::size_t pack_chunk = 8;  // slivers per packing task
      pfor((slivers + pack_chunk - 1) / pack_chunk, [&](std::size_t t) {
        pack_b<T, NR>(tb, B, ldb, k0, kc, j0, nc, t * pack_chunk, std::min(slivers, (t + 1) * pack_chunk), bp);
      });
      pfor(m_blocks * groups, [&](std::size_t task) {
        const std::size_t mb = task / groups, g = task % groups;
        const std::size_t i0 = mb * MC, mc = std::min(MC, M - i0);
        const std::size_t s0 = slivers * g / groups, s1 = slivers * (g + 1) / groups;
        T* ap = scratch<T, 1>(((mc + MR - 1) / MR) * MR * kc);
        pack_a<T, MR>(ta, A, lda, i0, mc, k0, kc, ap);
        // The first K slice applies the caller's beta (never reading C when
        // it is 0, so NaN there cannot leak); later slices accumulate.
        const T b_eff = first ? beta : T(1);
        alignas(64) T edge[MR * NR] = {};  // padding lanes are read (times beta) but never kept
        for (std::size_t s = s0; s < s1; ++s) {
          const std::size_t jj = s * NR, nr = std::min(NR, nc - jj);
          for (std::size_t ii = 0; ii < mc; ii += MR) {
            const std::size_t mr = std::min(MR, mc - ii);
            T* c = C + (i0 + ii) * ldc + j0 + jj;
            const T* a_s = ap + ii * kc;
            const T* b_s = bp + s * NR * kc;
            if (mr == MR && nr == NR) {
              if (b_eff != T(0)) prefetch_tile(c, mr, nr, ldc);
              Cfg::kernel(kc, a_s, b_s, c, ldc, alpha, b_eff);
            } else {
              // Edge tile: run the same kernel on a padded copy, so edge
              // elements see exactly the arithmetic interior ones do.
              if (b_eff != T(0))
                for (std::size_t i = 0; i < mr; ++i)
                  for (std::size_t j = 0; j < nr; ++j) edge[i * NR + j] = c[i * ldc + j];
              Cfg::kernel(kc, a_s, b_s, edge, NR, alpha, b_eff);
              for (std::size_t i = 0; i < mr; ++i)
                for (std::size_t j = 0; j < nr; ++j) c[i * ldc + j] = edge[i * NR + j];
            }
          }
        }
      });
    }
  }
}

#if STRATA_HOST_X86_DISPATCH
struct cpu_features {
  bool avx2_fma = false;
  bool avx512 = false;
};
inline const cpu_features& cpu() {
  static const cpu_features f = [] {
    cpu_features r;
    __builtin_cpu_init();
    r.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    r.avx512 = __builtin_cpu_supports("avx512f");
    return r;
  }();
  return f;
}
#endif

// What the queue asked for, or STRATA_HOST_SIMD, clamped to what the CPU has.
inline simd resolve_simd(simd requested) {
  if (requested == simd::automatic) {
    static const simd from_env = [] {
      const char* s = std::getenv("STRATA_HOST_SIMD");
      const std::string v = s ? s : "";
      if (v == "baseline") return simd::baseline;
      if (v == "avx2") return simd::avx2;
      if (v == "avx512") return simd::avx512;
      return simd::automatic;
    }();
    requested = from_env;
  }
#if STRATA_HOST_X86_DISPATCH
  const cpu_features& f = cpu();
  // Prefer AVX2 when automatic: on CPUs that split 512-bit ops (Zen 4) it is
  // as fast, and it avoids AVX-512 clock throttling on older Intel parts.
  if (requested == simd::automatic) requested = f.avx2_fma ? simd::avx2 : simd::baseline;
  if (requested == simd::avx512 && !f.avx512) requested = simd::avx2;
  if (requested == simd::avx2 && !f.avx2_fma) requested = simd::baseline;
  return requested;
#else
  return simd::baseline;
#endif
}

template <class T>
void gemm_dispatch(queue& q, trans ta, trans tb, std::size_t M, std::size_t N, std::size_t K, T alpha, const T* A,
                   std::size_t lda, const T* B, std::size_t ldb, T beta, T* C, std::size_t ldc) {
  constexpr bool f32 = std::is_same_v<T, float>;
  switch (resolve_simd(q.simd_path())) {
#if STRATA_HOST_X86_DISPATCH
    case simd::avx512:
      if constexpr (f32)
        return gemm_blocked<gemm_config<float, 12, 32, uk_avx512_f32>>(q, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta,
                                                                       C, ldc);
      else
        return gemm_blocked<gemm_config<double, 12, 16, uk_avx512_f64>>(q, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta,
                                                                        C, ldc);
    case simd::avx2:
      if constexpr (f32)
        return gemm_blocked<gemm_config<float, 6, 16, uk_avx2_f32>>(q, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C,
                                                                    ldc);
      else
        return gemm_blocked<gemm_config<double, 6, 8, uk_avx2_f64>>(q, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C,
                                                                    ldc);
#endif
    default:
      if constexpr (f32)
        return gemm_blocked<gemm_config<float, 6, 8, uk_base_f32>>(q, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C,
                                                                   ldc);
      else
        return gemm_blocked<gemm_config<double, 6, 4, uk_base_f64>>(q, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C,
                                                                    ldc);
  }
}

[[noreturn]] inline void bad_gemm_arg(const char* what) {
  throw std::invalid_argument(std::string("strata: gemm: ") + what);
}

}  // namespace detail

// C (M x N, leading dimension ldc) = alpha * op(A) * op(B) + beta * C, all
// row-major. op(A) is M x K: A is M x K (lda >= K) for trans::N, K x M
// (lda >= M) for trans::T; likewise op(B) is K x N. beta == 0 overwrites C
// without reading it; alpha == 0 or K == 0 only scales C (A, B unread).
// Accumulates in T (float GEMM keeps float partial sums, like cuBLAS).
template <class T>
  requires(std::is_same_v<T, float> || std::is_same_v<T, double>)
void gemm(queue& q, trans trans_a, trans trans_b, std::size_t M, std::size_t N, std::size_t K, T alpha, const T* A,
          std::size_t lda, const T* B, std::size_t ldb, T beta, T* C, std::size_t ldc) {
  if (M == 0 || N == 0) return;
  if (!C) detail::bad_gemm_arg("C is null");
  if (ldc < N) detail::bad_gemm_arg("ldc < N");
  const bool reads_ab = K != 0 && alpha != T(0);
  if (reads_ab) {
    if (!A || !B) detail::bad_gemm_arg("A or B is null");
    if (lda < (trans_a == trans::N ? K : M)) detail::bad_gemm_arg("lda too small for op(A)");
    if (ldb < (trans_b == trans::N ? N : K)) detail::bad_gemm_arg("ldb too small for op(B)");
  }
  if (!reads_ab) {
    // C = beta * C; beta == 0 writes exact zeros (no NaN propagation).
    const std::size_t rows_per_task = std::max<std::size_t>(1, (std::size_t(1) << 15) / N);
    q.parallel_for((M + rows_per_task - 1) / rows_per_task, [&](std::size_t t) {
      for (std::size_t i = t * rows_per_task, e = std::min(M, i + rows_per_task); i < e; ++i) {
        T* c = C + i * ldc;
        if (beta == T(0))
          for (std::size_t j = 0; j < N; ++j) c[j] = T(0);
        else if (beta != T(1))
          for (std::size_t j = 0; j < N; ++j) c[j] *= beta;
      }
    });
    return;
  }
  detail::gemm_dispatch(q, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// `batch` independent GEMMs at fixed element strides (attention heads,
// micro-batches); the cuBLASLt strided-batch layout.
template <class T>
  requires(std::is_same_v<T, float> || std::is_same_v<T, double>)
void gemm_strided_batched(queue& q, trans trans_a, trans trans_b, std::size_t M, std::size_t N, std::size_t K, T alpha,
                          const T* A, std::size_t lda, std::size_t stride_a, const T* B, std::size_t ldb,
                          std::size_t stride_b, T beta, T* C, std::size_t ldc, std::size_t stride_c,
                          std::size_t batch) {
  for (std::size_t b = 0; b < batch; ++b)
    gemm(q, trans_a, trans_b, M, N, K, alpha, A ? A + b * stride_a : A, lda, B ? B + b * stride_b : B, ldb, beta,
         C + b * stride_c, ldc);
}

// ---- bf16 operands -----------------------------------------------------------
// What cuBLASLt computes for CUDA_R_16BF operands with CUBLAS_COMPUTE_32F: the
// operands widened to float (exactly), products summed in float, the result
// rounded once to the output type. This is the reference the CUDA backend's bf16
// GEMMs and the mixed-precision trainer are checked against.

namespace detail {
// rows x cols of a row-major bf16 matrix (leading dimension ld) as contiguous floats.
inline std::vector<float> widen(queue& q, const bf16* X, std::size_t rows, std::size_t cols, std::size_t ld) {
  std::vector<float> w(rows * cols);
  q.parallel_for(rows, [&](std::size_t r) {
    for (std::size_t c = 0; c < cols; ++c) w[r * cols + c] = float(X[r * ld + c]);
  });
  return w;
}
struct bf16_operands {
  std::vector<float> a, b;
  std::size_t lda = 0, ldb = 0;
};
inline bf16_operands widen_operands(queue& q, trans ta, trans tb, std::size_t M, std::size_t N, std::size_t K,
                                    const bf16* A, std::size_t lda, const bf16* B, std::size_t ldb) {
  if (!A || !B) bad_gemm_arg("A or B is null");
  if (lda < (ta == trans::N ? K : M)) bad_gemm_arg("lda too small for op(A)");
  if (ldb < (tb == trans::N ? N : K)) bad_gemm_arg("ldb too small for op(B)");
  bf16_operands o;
  const std::size_t ar = ta == trans::N ? M : K, ac = ta == trans::N ? K : M;
  const std::size_t br = tb == trans::N ? K : N, bc = tb == trans::N ? N : K;
  o.a = widen(q, A, ar, ac, lda);
  o.b = widen(q, B, br, bc, ldb);
  o.lda = ac;
  o.ldb = bc;
  return o;
}
}  // namespace detail

// bf16 operands, float output: the weight gradient accumulated into FP32 master
// gradients (beta = 1) without a bf16 round trip.
inline void gemm(queue& q, trans trans_a, trans trans_b, std::size_t M, std::size_t N, std::size_t K, float alpha,
                 const bf16* A, std::size_t lda, const bf16* B, std::size_t ldb, float beta, float* C,
                 std::size_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0 || alpha == 0.0f)
    return gemm<float>(q, trans_a, trans_b, M, N, K, alpha, nullptr, lda, nullptr, ldb, beta, C, ldc);
  const detail::bf16_operands o = detail::widen_operands(q, trans_a, trans_b, M, N, K, A, lda, B, ldb);
  gemm<float>(q, trans_a, trans_b, M, N, K, alpha, o.a.data(), o.lda, o.b.data(), o.ldb, beta, C, ldc);
}

// bf16 operands and output: the float result (beta * C read widened) rounded once.
inline void gemm(queue& q, trans trans_a, trans trans_b, std::size_t M, std::size_t N, std::size_t K, float alpha,
                 const bf16* A, std::size_t lda, const bf16* B, std::size_t ldb, float beta, bf16* C,
                 std::size_t ldc) {
  if (M == 0 || N == 0) return;
  if (!C) detail::bad_gemm_arg("C is null");
  if (ldc < N) detail::bad_gemm_arg("ldc < N");
  std::vector<float> c = beta == 0.0f ? std::vector<float>(M * N) : detail::widen(q, C, M, N, ldc);
  gemm(q, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, c.data(), N);
  q.parallel_for(M, [&](std::size_t r) {
    for (std::size_t j = 0; j < N; ++j) C[r * ldc + j] = bf16(c[r * N + j]);
  });
}

}  // namespace strata::backend::host

// Implementation macros stay private to this header.
#undef STRATA_HOST_VECTOR_EXT
#undef STRATA_HOST_ALWAYS_INLINE
#undef STRATA_HOST_RESTRICT
#undef STRATA_HOST_PRAGMA
#undef STRATA_HOST_UNROLL
#undef STRATA_HOST_X86_DISPATCH
#undef STRATA_HOST_TARGET
