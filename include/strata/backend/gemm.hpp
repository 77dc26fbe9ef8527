#pragma once
// The GEMM kernel family's front (dispatch.hpp): row-major C = alpha * op(A) op(B) +
// beta * C, strided batches of them, and the product with a fused bias and activation.
// Implementations: host/gemm.hpp (the system's CBLAS), cuda/gemm.cuh and
// cuda/gemm_epilogue.cuh (cuBLASLt).
//
// Contract of every form: C is M x N with leading dimension ldc >= N. op(A) is M x K: A is
// M x K (lda >= K) for trans::N, K x M (lda >= M) for trans::T; likewise op(B) is K x N.
// beta == 0 overwrites C without reading it (a NaN there cannot leak); alpha == 0 or
// K == 0 only scales C (A and B are not read and may be null). Products accumulate in the
// compute type (float for float and the 16-bit types, double for double), like cuBLAS
// without split-K; the 16-bit types widen their operands exactly and round the result once.
//
// The Linear layer's products (row-major, X: rows x in, W: in x out):
//   forward  Y  = X W (+ bias, act)  gemm_bias_act(q, N, N, rows, out, in, 1, X, in, W, out, 0, Y, out, bias, act, pre)
//   dgrad    dX = dY W^T             gemm(q, N, T, rows, in, out, 1, dY, out, W, out, 0, dX, in)
//   wgrad    dW += X^T dY            gemm(q, T, N, in, out, rows, 1, X, in, dY, out, 1, dW, out)
//   bias     db += colsum(dY)        bias_grad(q, rows, out, dY, db, true)
#include <cstddef>
#include <type_traits>

#include "strata/backend/dispatch.hpp"
#include "strata/core/kernel_args.hpp"
#include "strata/core/precision.hpp"

namespace strata::backend {

namespace impl {
template <class Queue>
struct gemm_kernels;
}  // namespace impl

namespace detail {
// The checks every form makes before touching C; true when A and B are read (K != 0 and
// alpha != 0).
inline bool check_gemm(trans ta, trans tb, std::size_t M, std::size_t N, std::size_t K, bool alpha_zero,
                       const void* A, std::size_t lda, const void* B, std::size_t ldb, const void* C,
                       std::size_t ldc) {
  need(C != nullptr, "gemm", "C is null");
  need(ldc >= N, "gemm", "ldc < N");
  const bool reads_ab = K != 0 && !alpha_zero;
  if (reads_ab) {
    need(A && B, "gemm", "A or B is null");
    need(lda >= (ta == trans::N ? K : M), "gemm", "lda too small for op(A)");
    need(ldb >= (tb == trans::N ? N : K), "gemm", "ldb too small for op(B)");
  }
  return reads_ab;
}
}  // namespace detail

inline namespace kernels {

// C = alpha * op(A) op(B) + beta * C in T = float or double.
template <class T, kernel_queue Q>
  requires detail::is_real_v<T>
void gemm(Q& q, trans trans_a, trans trans_b, std::size_t M, std::size_t N, std::size_t K, T alpha, const T* A,
          std::size_t lda, const T* B, std::size_t ldb, T beta, T* C, std::size_t ldc) {
  if (M == 0 || N == 0) return;
  detail::check_gemm(trans_a, trans_b, M, N, K, alpha == T(0), A, lda, B, ldb, C, ldc);
  impl::gemm_kernels<Q>::gemm(q, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// 16-bit operands (bf16, f16), FP32 accumulation, float scalars. The output C is float
// (the weight gradient accumulated into FP32 master gradients, beta = 1, without a 16-bit
// round trip) or H (the float result, beta * C read widened, rounded once).
template <class H, class Out, kernel_queue Q>
  requires is_half16_v<H> && (std::is_same_v<Out, float> || std::is_same_v<Out, H>)
void gemm(Q& q, trans trans_a, trans trans_b, std::size_t M, std::size_t N, std::size_t K, float alpha, const H* A,
          std::size_t lda, const H* B, std::size_t ldb, float beta, Out* C, std::size_t ldc) {
  if (M == 0 || N == 0) return;
  detail::check_gemm(trans_a, trans_b, M, N, K, alpha == 0.0f, A, lda, B, ldb, C, ldc);
  impl::gemm_kernels<Q>::gemm(q, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// `batch` independent GEMMs at fixed element strides (attention heads, micro-batches):
// item b reads A + b·stride_a, B + b·stride_b and writes C + b·stride_c (cuBLASLt's
// strided-batch layout). T = float or double.
template <class T, kernel_queue Q>
  requires detail::is_real_v<T>
void gemm_strided_batched(Q& q, trans trans_a, trans trans_b, std::size_t M, std::size_t N, std::size_t K, T alpha,
                          const T* A, std::size_t lda, std::size_t stride_a, const T* B, std::size_t ldb,
                          std::size_t stride_b, T beta, T* C, std::size_t ldc, std::size_t stride_c,
                          std::size_t batch) {
  if (M == 0 || N == 0 || batch == 0) return;
  detail::check_gemm(trans_a, trans_b, M, N, K, alpha == T(0), A, lda, B, ldb, C, ldc);
  impl::gemm_kernels<Q>::gemm_strided_batched(q, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb,
                                              stride_b, beta, C, ldc, stride_c, batch);
}

// The same with 16-bit operands and output (FP32 accumulation, float scalars).
template <class H, kernel_queue Q>
  requires is_half16_v<H>
void gemm_strided_batched(Q& q, trans trans_a, trans trans_b, std::size_t M, std::size_t N, std::size_t K,
                          float alpha, const H* A, std::size_t lda, std::size_t stride_a, const H* B, std::size_t ldb,
                          std::size_t stride_b, float beta, H* C, std::size_t ldc, std::size_t stride_c,
                          std::size_t batch) {
  if (M == 0 || N == 0 || batch == 0) return;
  detail::check_gemm(trans_a, trans_b, M, N, K, alpha == 0.0f, A, lda, B, ldb, C, ldc);
  impl::gemm_kernels<Q>::gemm_strided_batched(q, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb,
                                              stride_b, beta, C, ldc, stride_c, batch);
}

// pre = alpha * op(A) op(B) + beta * C + bias (bias: length N, may be null); pre_out
// (ld = ldc, may be null; must not be C unless act == none) receives pre; C = act(pre).
// Equal to gemm then bias_activation_forward (a device backend fuses the bias and the
// activation into the product where it can). T: float, double, bf16, f16 (alpha and beta
// in float for the 16-bit types, whose product is rounded to T before the bias).
template <class T, kernel_queue Q>
  requires detail::is_elem_v<T>
void gemm_bias_act(Q& q, trans trans_a, trans trans_b, std::size_t M, std::size_t N, std::size_t K,
                   gemm_scalar_t<T> alpha, const T* A, std::size_t lda, const T* B, std::size_t ldb,
                   gemm_scalar_t<T> beta, T* C, std::size_t ldc, const T* bias, activation act, T* pre_out) {
  if (M == 0 || N == 0) return;
  detail::check_gemm(trans_a, trans_b, M, N, K, alpha == gemm_scalar_t<T>(0), A, lda, B, ldb, C, ldc);
  detail::need(pre_out != C || act == activation::none, "gemm", "pre_out must not alias C when act != none");
  impl::gemm_kernels<Q>::gemm_bias_act(q, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias, act,
                                       pre_out);
}

}  // namespace kernels

}  // namespace strata::backend
