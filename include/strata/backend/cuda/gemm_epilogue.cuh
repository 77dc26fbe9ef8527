// strata-header: cuda-only
#pragma once
// strata CUDA backend: the Linear layer's fused GEMMs (as host/gemm.hpp's gemm_bias_act):
// bias and activation in cuBLASLt's epilogue, the weight gradient with the bias
// gradient in one pass over dY.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "strata/backend/cuda/elementwise.cuh"
#include "strata/backend/cuda/gemm.cuh"
#include "strata/backend/cuda/reduction.cuh"

namespace strata::backend::cuda {

// ---------------------------------------------------------------------------
// GEMM with fused bias + activation (Linear forward)
// ---------------------------------------------------------------------------

// pre = alpha * op(A) op(B) + beta * C + bias (bias: length N, may be null);
// pre_out (ld = ldc, may be null; must not be C unless act == none) receives
// pre; C = act(pre). Equivalent to gemm then bias_activation_forward, but the
// bias and the activation ride cuBLASLt's epilogue where it has one:
//   none        BIAS epilogue (pre_out, if asked, is a copy of C)
//   relu        RELU_BIAS; with pre_out: BIAS epilogue into pre_out, then relu
//   gelu        GELU(_AUX)_BIAS when q.lt_gelu_epilogue(), else unfused
// and falls back to the unfused pair when cuBLASLt has no algorithm.
// T: float, double, bf16, f16 (alpha/beta in float for the 16-bit types).
template <class T>
  requires detail::is_elem_v<T>
void gemm_bias_act(queue& q, trans trans_a, trans trans_b, std::size_t M, std::size_t N, std::size_t K,
                   gemm_scalar_t<T> alpha, const T* A, std::size_t lda, const T* B, std::size_t ldb,
                   gemm_scalar_t<T> beta, T* C, std::size_t ldc, const T* bias, activation act, T* pre_out) {
  using S = gemm_scalar_t<T>;
  if (M == 0 || N == 0) return;
  const bool reads_ab =
      detail::check_gemm_args(trans_a, trans_b, M, N, K, alpha == S(0), A, lda, B, ldb, C, ldc);
  if (pre_out == C && act != activation::none) detail::bad_gemm_arg("pre_out must not alias C when act != none");
  if (!reads_ab) {
    detail::scale_matrices(q, 1, M, N, C, ldc, 0, beta);
    detail::bias_act_2d(q, act, M, N, C, ldc, bias, pre_out, ldc, C, ldc);
    return;
  }
  detail::lt_call c =
      detail::make_call<T, T, S>(q, trans_a, trans_b, M, N, K, &alpha, A, lda, 0, B, ldb, 0, &beta, C, ldc, 0, 1);
  c.bias = bias;
  bool done = false;
  if (act == activation::none) {
    c.epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    done = detail::lt_matmul(q, c);
    if (done && pre_out && pre_out != C) copy_2d(q, M, N, static_cast<const T*>(C), ldc, pre_out, ldc);
  } else if (act == activation::relu && !pre_out) {
    c.epilogue = bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    done = detail::lt_matmul(q, c);
  } else if (act == activation::relu) {
    c.epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    c.D = pre_out;  // D != C: cuBLASLt reads C (beta) and writes pre_out
    done = detail::lt_matmul(q, c);
    if (done)
      detail::bias_act_2d(q, act, M, N, static_cast<const T*>(pre_out), ldc, static_cast<const T*>(nullptr),
                          static_cast<T*>(nullptr), ldc, C, ldc);
  } else if (act == activation::gelu && q.lt_gelu_epilogue()) {
    if (!pre_out) {
      c.epilogue = bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
      done = detail::lt_matmul(q, c);
    } else if (ldc % 8 == 0) {  // cuBLASLt's requirement on the aux leading dimension
      c.epilogue = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
      c.aux = pre_out;
      c.aux_ld = ldc;
      done = detail::lt_matmul(q, c);
    }
  }
  if (!done) {
    detail::lt_call plain =
        detail::make_call<T, T, S>(q, trans_a, trans_b, M, N, K, &alpha, A, lda, 0, B, ldb, 0, &beta, C, ldc, 0, 1);
    (void)detail::lt_matmul(q, plain);
    detail::bias_act_2d(q, act, M, N, static_cast<const T*>(C), ldc, bias, pre_out, ldc, C, ldc);
  }
}

// Weight and bias gradients of a Linear layer (X: rows x K, dY: rows x N,
// row-major):
//   dW (K x N, ldw) = X^T dY + beta * dW
//   dbias (N)       = (accumulate ? dbias : 0) + column sums of dY
// in one cuBLASLt call: the BGRADA epilogue sums dY (Lt's A operand) while
// the product streams it, saving bias_grad's separate pass over dY. The sums
// accumulate in the GEMM's compute type (FP32; TF32 inputs in TF32 mode), not
// in double like bias_grad, so this is opt-in. Falls back to gemm +
// bias_grad when cuBLASLt has no algorithm. T: float or double.
template <class T>
  requires detail::is_real_v<T>
void gemm_wgrad_bias(queue& q, std::size_t rows, std::size_t K, std::size_t N, const T* X, std::size_t ldx,
                     const T* dY, std::size_t ldy, T beta, T* dW, std::size_t ldw, T* dbias, bool accumulate) {
  if (K == 0 || N == 0) return;
  detail::need(dbias != nullptr, "gemm_wgrad_bias", "null dbias");
  const T one = T(1);
  bool done = false;
  if (rows > 0) {
    (void)detail::check_gemm_args(trans::T, trans::N, K, N, rows, false, X, ldx, dY, ldy, dW, ldw);
    detail::lt_call c = detail::make_call<T, T, T>(q, trans::T, trans::N, K, N, rows, &one, X, ldx, 0, dY, ldy, 0,
                                                   &beta, dW, ldw, 0, 1);
    c.epilogue = CUBLASLT_EPILOGUE_BGRADA;
    // The epilogue overwrites its output: when accumulating, it goes to the
    // end of the workspace (kept out of the matmul's share), then is added.
    const std::size_t reserve = detail::round_up(N * sizeof(T), alignment);
    T* tmp = dbias;
    if (accumulate && reserve * 4 <= q.workspace_bytes()) {
      c.workspace_reserve = reserve;
      tmp = reinterpret_cast<T*>(static_cast<unsigned char*>(q.workspace()) + q.workspace_bytes() - reserve);
    }
    if (!accumulate || tmp != dbias) {
      c.bias = tmp;
      done = detail::lt_matmul(q, c);
      if (done && accumulate) axpy(q, N, 1.0, static_cast<const T*>(tmp), dbias);
    }
  }
  if (!done) {
    gemm(q, trans::T, trans::N, K, N, rows, one, X, ldx, dY, ldy, beta, dW, ldw);
    bias_grad(q, rows, N, dY, dbias, accumulate);
  }
}

}  // namespace strata::backend::cuda
