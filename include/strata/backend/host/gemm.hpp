// strata host backend: the host implementation of backend/gemm.hpp (row-major
// C = alpha * op(A) * op(B) + beta * C; the contract is there), through the system's
// CBLAS (Debian: OpenBLAS, which picks its kernels for the CPU it runs on: AVX2,
// AVX-512, ...). strata keeps no GEMM of its own.
//
// Threads: a GEMM on a queue uses the queue's threads (the rank's share of the
// cores, core/threads.hpp): strata's pool splits C into one block per thread
// and each block is one single-threaded BLAS call, so strata and the BLAS never
// hold more threads than that share between them.
//
// Determinism: the BLAS does not promise that a block of C is computed with the
// same arithmetic whatever its size and position, so a host GEMM's result may
// change with the thread count; every other host kernel's does not (launch.hpp).
#pragma once

#if !__has_include(<cblas.h>)
#error "strata's host backend needs a CBLAS (Debian: apt-get install libopenblas-dev; link with -lopenblas)"
#endif
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/backend/gemm.hpp"
#include "strata/backend/host/elementwise.hpp"
#include "strata/backend/host/host.hpp"
#include "strata/core/kernel_args.hpp"
#include "strata/core/precision.hpp"

namespace strata::backend::host {

namespace detail {

// CBLAS takes int: a dimension beyond INT_MAX would wrap silently, so the host refuses it
// (the front's checks are the rest).
inline void check_blas_ints(std::size_t M, std::size_t N, std::size_t K, std::size_t lda, std::size_t ldb,
                            std::size_t ldc) {
  const auto fits = [](std::size_t v) { return v <= static_cast<std::size_t>(INT_MAX); };
  need(fits(M) && fits(N) && fits(K), "gemm", "M, N or K exceeds INT_MAX");
  need(fits(lda) && fits(ldb) && fits(ldc), "gemm", "a leading dimension exceeds INT_MAX");
}

inline CBLAS_TRANSPOSE blas_trans(trans t) { return t == trans::N ? CblasNoTrans : CblasTrans; }

// The BLAS runs single-threaded inside strata's pool tasks (one BLAS call per
// block of C), so the process has one set of worker threads: a BLAS's own
// workers spin-wait after each call (OpenBLAS: about 0.1 s of sched_yield) and
// would take the cores from strata's elementwise kernels and from other ranks.
inline void blas_single_threaded() {
#ifdef OPENBLAS_VERSION
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);  // a plain read when already 1
#endif
}

// A row or a column block of C per thread, in multiples of 16 so that every
// block but the last runs the BLAS's full register tiles.
struct gemm_split {
  bool rows = true;
  std::size_t parts = 1, step = 0;
};
inline gemm_split split_for(std::size_t M, std::size_t N, std::size_t K, unsigned threads) {
  constexpr std::size_t tile = 16;
  constexpr double min_flops_per_part = 2e6;  // below this, waking threads costs more
  gemm_split s;
  const double flops = 2.0 * double(M) * double(N) * double(K);
  std::size_t parts = std::min<std::size_t>(threads, std::size_t(flops / min_flops_per_part));
  if (parts <= 1) return s;
  // each block packs the whole of the other operand: split the larger side of C, so
  // the smaller operand is the one packed twice
  s.rows = M > N;
  if ((s.rows ? M : N) < parts * tile) s.rows = !s.rows;
  const std::size_t extent = s.rows ? M : N;
  s.step = (extent + parts - 1) / parts;
  s.step = (s.step + tile - 1) / tile * tile;
  s.parts = (extent + s.step - 1) / s.step;
  return s;
}

// C = beta * C without reading A or B; beta == 0 writes exact zeros (no NaN kept).
template <class T>
void scale_c(queue& q, std::size_t M, std::size_t N, T beta, T* C, std::size_t ldc) {
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
}

}  // namespace detail

// ---- 16-bit operands (bf16, f16) -----------------------------------------------
// What cuBLASLt computes for CUDA_R_16BF / CUDA_R_16F operands with CUBLAS_COMPUTE_32F:
// the operands widened to float (exactly), products summed in float, the result
// rounded once to the output type. With a CBLAS that has cblas_sbgemm (CMake detects
// it and defines STRATA_BLAS_SBGEMM) the BLAS does exactly that for bf16; Debian's
// OpenBLAS is built without it, and no CBLAS has an fp16 GEMM, so the operands are
// widened here and multiplied by the float GEMM.

namespace detail {
// Grow-only per-thread scratch for widened operands: repeated GEMMs reuse it.
template <int Slot>
inline float* widen_scratch(std::size_t n) {
  thread_local std::vector<float> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}
// rows x cols of a row-major 16-bit matrix (leading dimension ld) into w (ld = cols).
template <class H>
void widen_rows(const H* X, std::size_t rows, std::size_t cols, std::size_t ld, float* w) {
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) w[r * cols + c] = float(X[r * ld + c]);
}
template <class H>
void widen(queue& q, const H* X, std::size_t rows, std::size_t cols, std::size_t ld, float* w) {
  q.parallel_for(rows, [&](std::size_t r) { widen_rows(X + r * ld, 1, cols, ld, w + r * cols); });
}
}  // namespace detail

// Static members on arguments the front has checked (impl::gemm_kernels<queue>).
struct gemm_kernels {
  template <class T>
    requires detail::is_real_v<T>
  static void gemm(queue& q, trans trans_a, trans trans_b, std::size_t M, std::size_t N, std::size_t K, T alpha,
                   const T* A, std::size_t lda, const T* B, std::size_t ldb, T beta, T* C, std::size_t ldc) {
    detail::check_blas_ints(M, N, K, lda, ldb, ldc);
    if (K == 0 || alpha == T(0)) return detail::scale_c(q, M, N, beta, C, ldc);
    detail::blas_single_threaded();
    const auto ta = detail::blas_trans(trans_a), tb = detail::blas_trans(trans_b);
    auto call = [&](std::size_t m, std::size_t n, const T* a, const T* b, T* c) {
      if constexpr (std::is_same_v<T, float>)
        cblas_sgemm(CblasRowMajor, ta, tb, int(m), int(n), int(K), alpha, a, int(lda), b, int(ldb), beta, c,
                    int(ldc));
      else
        cblas_dgemm(CblasRowMajor, ta, tb, int(m), int(n), int(K), alpha, a, int(lda), b, int(ldb), beta, c,
                    int(ldc));
    };
    const detail::gemm_split s = detail::split_for(M, N, K, q.threads());
    if (s.parts <= 1) return call(M, N, A, B, C);
    q.parallel_for(s.parts, [&](std::size_t p) {
      const std::size_t begin = p * s.step;
      if (s.rows) {  // rows [begin, end) of C: rows of op(A)
        const std::size_t m = std::min(M, begin + s.step) - begin;
        call(m, N, trans_a == trans::N ? A + begin * lda : A + begin, B, C + begin * ldc);
      } else {  // columns [begin, end) of C: columns of op(B)
        const std::size_t n = std::min(N, begin + s.step) - begin;
        call(M, n, A, trans_b == trans::N ? B + begin : B + begin * ldb, C + begin);
      }
    });
  }

  // Many small items run one item per pool task (each a single-threaded BLAS call, so
  // the result does not depend on the thread count); a few large ones run one after
  // another, each split over the pool like gemm.
  template <class T>
    requires detail::is_real_v<T>
  static void gemm_strided_batched(queue& q, trans trans_a, trans trans_b, std::size_t M, std::size_t N,
                                   std::size_t K, T alpha, const T* A, std::size_t lda, std::size_t stride_a,
                                   const T* B, std::size_t ldb, std::size_t stride_b, T beta, T* C, std::size_t ldc,
                                   std::size_t stride_c, std::size_t batch) {
    detail::check_blas_ints(M, N, K, lda, ldb, ldc);
    const bool reads_ab = K != 0 && alpha != T(0);
    if (!reads_ab || batch == 1 || batch < q.threads()) {
      for (std::size_t b = 0; b < batch; ++b)
        gemm(q, trans_a, trans_b, M, N, K, alpha, A ? A + b * stride_a : A, lda, B ? B + b * stride_b : B, ldb, beta,
             C + b * stride_c, ldc);
      return;
    }
    detail::blas_single_threaded();
    const auto ta = detail::blas_trans(trans_a), tb = detail::blas_trans(trans_b);
    q.parallel_for(batch, [&](std::size_t b) {
      const T* a = A + b * stride_a;
      const T* bb = B + b * stride_b;
      T* c = C + b * stride_c;
      if constexpr (std::is_same_v<T, float>)
        cblas_sgemm(CblasRowMajor, ta, tb, int(M), int(N), int(K), alpha, a, int(lda), bb, int(ldb), beta, c,
                    int(ldc));
      else
        cblas_dgemm(CblasRowMajor, ta, tb, int(M), int(N), int(K), alpha, a, int(lda), bb, int(ldb), beta, c,
                    int(ldc));
    });
  }

  // 16-bit operands, float output.
  template <class H>
    requires is_half16_v<H>
  static void gemm(queue& q, trans trans_a, trans trans_b, std::size_t M, std::size_t N, std::size_t K, float alpha,
                   const H* A, std::size_t lda, const H* B, std::size_t ldb, float beta, float* C, std::size_t ldc) {
    detail::check_blas_ints(M, N, K, lda, ldb, ldc);
    if (K == 0 || alpha == 0.0f) return detail::scale_c(q, M, N, beta, C, ldc);
#if defined(STRATA_BLAS_SBGEMM)
    if constexpr (std::is_same_v<H, bf16>) {
      detail::blas_single_threaded();
      static_assert(sizeof(bfloat16) == sizeof(bf16));
      cblas_sbgemm(CblasRowMajor, detail::blas_trans(trans_a), detail::blas_trans(trans_b), int(M), int(N), int(K),
                   alpha, reinterpret_cast<const bfloat16*>(A), int(lda), reinterpret_cast<const bfloat16*>(B),
                   int(ldb), beta, C, int(ldc));
      return;
    }
#endif
    const std::size_t ar = trans_a == trans::N ? M : K, ac = trans_a == trans::N ? K : M;
    const std::size_t br = trans_b == trans::N ? K : N, bc = trans_b == trans::N ? N : K;
    float* a = detail::widen_scratch<0>(ar * ac);
    float* b = detail::widen_scratch<1>(br * bc);
    detail::widen(q, A, ar, ac, lda, a);
    detail::widen(q, B, br, bc, ldb, b);
    gemm<float>(q, trans_a, trans_b, M, N, K, alpha, a, ac, b, bc, beta, C, ldc);
  }

  // 16-bit operands and output: the float product, rounded once.
  template <class H>
    requires is_half16_v<H>
  static void gemm(queue& q, trans trans_a, trans trans_b, std::size_t M, std::size_t N, std::size_t K, float alpha,
                   const H* A, std::size_t lda, const H* B, std::size_t ldb, float beta, H* C, std::size_t ldc) {
    float* c = detail::widen_scratch<2>(M * N);
    if (beta != 0.0f) detail::widen(q, static_cast<const H*>(C), M, N, ldc, c);
    gemm(q, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, c, N);
    q.parallel_for(M, [&](std::size_t r) {
      for (std::size_t j = 0; j < N; ++j) C[r * ldc + j] = H(c[r * N + j]);
    });
  }

  // 16-bit operands and output, one item per pool task: its operands widened to float,
  // multiplied in float, rounded once.
  template <class H>
    requires is_half16_v<H>
  static void gemm_strided_batched(queue& q, trans trans_a, trans trans_b, std::size_t M, std::size_t N,
                                   std::size_t K, float alpha, const H* A, std::size_t lda, std::size_t stride_a,
                                   const H* B, std::size_t ldb, std::size_t stride_b, float beta, H* C,
                                   std::size_t ldc, std::size_t stride_c, std::size_t batch) {
    detail::check_blas_ints(M, N, K, lda, ldb, ldc);
    const bool reads_ab = K != 0 && alpha != 0.0f;
    detail::blas_single_threaded();
    const std::size_t ar = trans_a == trans::N ? M : K, ac = trans_a == trans::N ? K : M;
    const std::size_t br = trans_b == trans::N ? K : N, bc = trans_b == trans::N ? N : K;
    q.parallel_for(batch, [&](std::size_t b) {
      float* a = detail::widen_scratch<0>(ar * ac);
      float* bb = detail::widen_scratch<1>(br * bc);
      float* c = detail::widen_scratch<2>(M * N);
      H* cb = C + b * stride_c;
      if (beta != 0.0f) detail::widen_rows(static_cast<const H*>(cb), M, N, ldc, c);
      if (reads_ab) {
        detail::widen_rows(A + b * stride_a, ar, ac, lda, a);
        detail::widen_rows(B + b * stride_b, br, bc, ldb, bb);
        cblas_sgemm(CblasRowMajor, detail::blas_trans(trans_a), detail::blas_trans(trans_b), int(M), int(N), int(K),
                    alpha, a, int(ac), bb, int(bc), beta, c, int(N));
      } else {
        for (std::size_t i = 0; i < M * N; ++i) c[i] = beta == 0.0f ? 0.0f : beta * c[i];
      }
      for (std::size_t r = 0; r < M; ++r)
        for (std::size_t j = 0; j < N; ++j) cb[r * ldc + j] = H(c[r * N + j]);
    });
  }

  // The product, then bias and activation row by row (the host form of the CUDA backend's
  // fused cuBLASLt epilogue; the 16-bit product is rounded to T before the bias, as the
  // unfused CUDA path does).
  template <class T>
  static void gemm_bias_act(queue& q, trans trans_a, trans trans_b, std::size_t M, std::size_t N, std::size_t K,
                            gemm_scalar_t<T> alpha, const T* A, std::size_t lda, const T* B, std::size_t ldb,
                            gemm_scalar_t<T> beta, T* C, std::size_t ldc, const T* bias, activation act, T* pre_out) {
    gemm(q, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (!bias && act == activation::none && !pre_out) return;
    detail::for_rows(q, M, N, [&](std::size_t r) {
      elementwise_kernels::bias_activation_forward(q, act, 1, N, C + r * ldc, bias,
                                                   pre_out ? pre_out + r * ldc : nullptr, C + r * ldc);
    });
  }
};

}  // namespace strata::backend::host

namespace strata::backend::impl {
template <>
struct gemm_kernels<host::queue> : host::gemm_kernels {};
}  // namespace strata::backend::impl
