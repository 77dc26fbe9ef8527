#pragma once
// Argument vocabulary of the kernel families every backend provides (host and CUDA
// alike), so that layers and the executor can name them without a backend.
namespace strata::backend {

// op(X) for gemm (maps to CblasNoTrans/CblasTrans and CUBLAS_OP_N/CUBLAS_OP_T).
enum class trans : unsigned char { N, T };

// Pointwise nonlinearity fused after a bias add. gelu is the tanh approximation
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
enum class activation : unsigned char { none, relu, gelu };

}  // namespace strata::backend
