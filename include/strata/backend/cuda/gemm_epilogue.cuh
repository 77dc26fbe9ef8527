// strata-header: cuda-only
#pragma once
// strata CUDA backend, CUDA only: the Linear layer's weight gradient with its bias
// gradient in one pass over dY (cuBLASLt's BGRADA epilogue). The fused forward,
// gemm_bias_act, is the gemm family's (backend/gemm.hpp, cuda/gemm.cuh).
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "strata/backend/cuda/elementwise.cuh"
#include "strata/backend/cuda/gemm.cuh"
#include "strata/backend/cuda/reduction.cuh"

namespace strata::backend::cuda {

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
    (void)backend::detail::check_gemm(trans::T, trans::N, K, N, rows, false, X, ldx, dY, ldy, dW, ldw);
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
