// strata-header: cuda-only
// strata CUDA backend: the CUDA implementation of backend/gemm.hpp (row-major
// C = alpha * op(A) op(B) + beta * C and its forms; the contract is there), through
// cuBLASLt.
//
// cuBLASLt is column-major, and a row-major matrix is the
// column-major view of its transpose, so we ask for
//     C^T (N x M, col-major, ld = ldc) = op(B)^T (N x K) * op(A)^T (K x M)
// i.e. swap the operands (Lt's A is our B, Lt's B is our A) and keep each
// operand's own transpose flag. A row bias of C (length N) becomes a bias
// over the rows of Lt's D, which is exactly what Lt's BIAS epilogue adds.
//
// Types: float (exact FP32, or TF32 tensor cores when the queue asks for
// it), double, and 16-bit operands (strata::bf16 as CUDA_R_16BF, strata::f16
// as CUDA_R_16F) with FP32 accumulation writing the same 16-bit type or float.
// Plans (descriptors + heuristic algorithm) are cached per queue, keyed by the
// whole problem signature including pointer alignment, so steady-state calls
// cost one cublasLtMatmul.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "strata/backend/cuda/cuda.hpp"
#include "strata/backend/cuda/elementwise.cuh"
#include "strata/backend/gemm.hpp"
#include "strata/core/kernel_args.hpp"
#include "strata/core/precision.hpp"

namespace strata::backend::cuda {

// The backends share one bf16 and one f16 (strata/core/precision.hpp): their
// bits are what cuBLASLt reads and writes as CUDA_R_16BF and CUDA_R_16F.
using bf16 = strata::bf16;
using f16 = strata::f16;

namespace detail {

// Largest power of two (<= 256) dividing every address a batched operand
// takes: cuBLASLt's heuristic must not pick a kernel that needs more.
inline std::int64_t alignment_of(const void* p, std::size_t stride_bytes = 0) noexcept {
  const std::uintptr_t v = reinterpret_cast<std::uintptr_t>(p) | static_cast<std::uintptr_t>(stride_bytes);
  if (v == 0) return 256;
  std::int64_t a = 1;
  while (a < 256 && (v % static_cast<std::uintptr_t>(2 * a)) == 0) a *= 2;
  return a;
}

struct lt_call {
  cudaDataType_t ab_type = CUDA_R_32F, c_type = CUDA_R_32F, scale_type = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  std::size_t elem_ab = 4, elem_c = 4;
  trans ta = trans::N, tb = trans::N;
  std::size_t M = 0, N = 0, K = 0;
  const void* A = nullptr;
  std::size_t lda = 0, stride_a = 0;
  const void* B = nullptr;
  std::size_t ldb = 0, stride_b = 0;
  const void* C = nullptr;  // read only when beta != 0
  void* D = nullptr;        // output, same layout as C
  std::size_t ldc = 0, stride_c = 0;
  std::size_t batch = 1;
  const void* alpha = nullptr;  // host scalars of scale_type
  const void* beta = nullptr;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // length N, c_type
  void* aux = nullptr;         // GELU_AUX: pre-activation output, ld aux_ld
  std::size_t aux_ld = 0;
  // Bytes at the end of the queue's workspace the matmul must leave alone
  // (the caller keeps an epilogue output there).
  std::size_t workspace_reserve = 0;
};

inline lt_key make_key(const lt_call& c) {
  lt_key k;
  std::int64_t* v = k.v;
  v[0] = c.ab_type;
  v[1] = c.c_type;
  v[2] = c.scale_type;
  v[3] = c.compute;
  v[4] = static_cast<std::int64_t>(c.ta);
  v[5] = static_cast<std::int64_t>(c.tb);
  v[6] = static_cast<std::int64_t>(c.M);
  v[7] = static_cast<std::int64_t>(c.N);
  v[8] = static_cast<std::int64_t>(c.K);
  v[9] = static_cast<std::int64_t>(c.lda);
  v[10] = static_cast<std::int64_t>(c.ldb);
  v[11] = static_cast<std::int64_t>(c.ldc);
  v[12] = static_cast<std::int64_t>(c.stride_a);
  v[13] = static_cast<std::int64_t>(c.stride_b);
  v[14] = static_cast<std::int64_t>(c.stride_c);
  v[15] = static_cast<std::int64_t>(c.batch);
  v[16] = c.epilogue;
  v[17] = static_cast<std::int64_t>(c.aux_ld);
  v[18] = alignment_of(c.A, c.stride_a * c.elem_ab);
  v[19] = alignment_of(c.B, c.stride_b * c.elem_ab);
  v[20] = alignment_of(c.C, c.stride_c * c.elem_c);
  v[21] = alignment_of(c.D, c.stride_c * c.elem_c);
  v[22] = c.bias ? alignment_of(c.bias) : 0;
  v[23] = c.aux ? alignment_of(c.aux) : 0;
  v[24] = static_cast<std::int64_t>(c.workspace_reserve);
  return k;
}

template <class V>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const V& value) {
  STRATA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &value, sizeof value));
}
template <class V>
void set_layout(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr, const V& value) {
  STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, attr, &value, sizeof value));
}

inline std::unique_ptr<lt_plan> build_plan(queue& q, const lt_call& c, const lt_key& key) {
  auto p = std::make_unique<lt_plan>();
  STRATA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, c.compute, c.scale_type));
  // Lt's A is our B, Lt's B is our A (see the file comment).
  const cublasOperation_t op_a = c.tb == trans::N ? CUBLAS_OP_N : CUBLAS_OP_T;
  const cublasOperation_t op_b = c.ta == trans::N ? CUBLAS_OP_N : CUBLAS_OP_T;
  set_desc(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  set_desc(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  set_desc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, c.epilogue);
  if (c.bias) {
    set_desc(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<std::int32_t>(c.c_type));
    // The heuristic reads pointer values for their alignment.
    set_desc(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, c.bias);
  }
  if (c.aux) {
    set_desc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, c.aux);
    set_desc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, static_cast<std::int64_t>(c.aux_ld));
  }
  const auto u = [](std::size_t x) { return static_cast<std::uint64_t>(x); };
  const auto ld = [](std::size_t x) { return static_cast<std::int64_t>(x); };
  // Column-major shapes of the stored matrices (rows x cols, ld).
  if (c.tb == trans::N)
    STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, c.ab_type, u(c.N), u(c.K), ld(c.ldb)));
  else
    STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, c.ab_type, u(c.K), u(c.N), ld(c.ldb)));
  if (c.ta == trans::N)
    STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, c.ab_type, u(c.K), u(c.M), ld(c.lda)));
  else
    STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, c.ab_type, u(c.M), u(c.K), ld(c.lda)));
  STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, c.c_type, u(c.N), u(c.M), ld(c.ldc)));
  STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->d, c.c_type, u(c.N), u(c.M), ld(c.ldc)));
  if (c.batch > 1) {
    const auto count = static_cast<std::int32_t>(c.batch);
    for (cublasLtMatrixLayout_t l : {p->a, p->b, p->c, p->d}) set_layout(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, count);
    set_layout(p->a, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, static_cast<std::int64_t>(c.stride_b));
    set_layout(p->b, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, static_cast<std::int64_t>(c.stride_a));
    set_layout(p->c, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, static_cast<std::int64_t>(c.stride_c));
    set_layout(p->d, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, static_cast<std::int64_t>(c.stride_c));
  }

  cublasLtMatmulPreference_t pref = nullptr;
  STRATA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  struct pref_guard {
    cublasLtMatmulPreference_t p;
    ~pref_guard() { (void)cublasLtMatmulPreferenceDestroy(p); }
  } guard{pref};
  const auto set_pref = [&](cublasLtMatmulPreferenceAttributes_t attr, auto value) {
    STRATA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof value));
  };
  set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
           static_cast<std::uint64_t>(q.workspace_bytes() - c.workspace_reserve));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<std::uint32_t>(key.v[19]));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<std::uint32_t>(key.v[18]));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, static_cast<std::uint32_t>(key.v[20]));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<std::uint32_t>(key.v[21]));

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(q.lt_handle(), p->desc, p->a, p->b, p->c, p->d, pref, 1,
                                                           &result, &found);
  if (st == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
    p->algo = result.algo;
    p->supported = true;
  } else if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) {
    STRATA_CUBLAS_CHECK(st);
  }
  // A plain product without an algorithm is a configuration cuBLASLt cannot
  // run at all: fail loudly. With an epilogue the caller falls back.
  if (!p->supported && c.epilogue == CUBLASLT_EPILOGUE_DEFAULT)
    STRATA_CUBLAS_CHECK(CUBLAS_STATUS_NOT_SUPPORTED);
  return p;
}

// Runs the product; false (nothing enqueued) when cuBLASLt has no algorithm
// for this epilogue configuration, so the caller can run it unfused.
inline bool lt_matmul(queue& q, const lt_call& c) {
  const lt_key key = make_key(c);
  auto& plans = q.state().plans;
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, build_plan(q, c, key)).first;
  lt_plan& p = *it->second;
  if (!p.supported) return false;
  // Pointers change from call to call (same alignment, by the key).
  if (c.bias) set_desc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, c.bias);
  if (c.aux) set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, c.aux);
  STRATA_CUBLAS_CHECK(cublasLtMatmul(q.lt_handle(), p.desc, c.alpha, c.B, p.a, c.A, p.b, c.beta, c.C ? c.C : c.D, p.c,
                                     c.D, p.d, &p.algo, q.workspace(), q.workspace_bytes() - c.workspace_reserve,
                                     q.stream()));
  return true;
}

// C = beta * C over `batch` M x N matrices (the alpha == 0 / K == 0 case);
// beta == 0 writes exact zeros without reading C (NaN there cannot leak).
template <class T, class S>
__global__ void k_scale_matrices(std::size_t batch, std::size_t M, std::size_t N, T* C, std::size_t ldc,
                                 std::size_t stride_c, S beta) {
  const std::size_t per = M * N, total = per * batch;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < total;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t b = i / per, r = (i % per) / N, col = i % N;
    T* p = C + b * stride_c + r * ldc + col;
    *p = beta == S(0) ? T(S(0)) : T(S(*p) * beta);
  }
}

template <class T, class S>
void scale_matrices(queue& q, std::size_t batch, std::size_t M, std::size_t N, T* C, std::size_t ldc,
                    std::size_t stride_c, S beta) {
  if (beta == S(1)) return;
  const std::size_t total = batch * M * N;
  const unsigned threads = 256;
  const std::size_t want = (total + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>(want, std::size_t(q.sm_count()) * 8));
  k_scale_matrices<<<blocks, threads, 0, q.stream()>>>(batch, M, N, C, ldc, stride_c, beta);
  STRATA_CUDA_CHECK_LAUNCH("k_scale_matrices");
}

template <class T>
struct lt_types;
template <>
struct lt_types<float> {
  static constexpr cudaDataType_t data = CUDA_R_32F;
};
template <>
struct lt_types<double> {
  static constexpr cudaDataType_t data = CUDA_R_64F;
};
template <>
struct lt_types<bf16> {
  static constexpr cudaDataType_t data = CUDA_R_16BF;
};
template <>
struct lt_types<f16> {
  static constexpr cudaDataType_t data = CUDA_R_16F;
};

// Describes one product for lt_matmul. TA operands, TC output, S scalars
// (float for float and 16-bit data, double for double); alpha/beta must outlive
// the lt_matmul call.
template <class TA, class TC, class S>
lt_call make_call(const queue& q, trans ta, trans tb, std::size_t M, std::size_t N, std::size_t K, const S* alpha,
                  const TA* A, std::size_t lda, std::size_t stride_a, const TA* B, std::size_t ldb,
                  std::size_t stride_b, const S* beta, TC* C, std::size_t ldc, std::size_t stride_c,
                  std::size_t batch) {
  lt_call c;
  c.ab_type = lt_types<TA>::data;
  c.c_type = lt_types<TC>::data;
  c.scale_type = std::is_same_v<S, double> ? CUDA_R_64F : CUDA_R_32F;
  if constexpr (std::is_same_v<S, double>)
    c.compute = CUBLAS_COMPUTE_64F;
  else if constexpr (std::is_same_v<TA, float>)
    c.compute = q.math() == fp32_math::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  else
    c.compute = CUBLAS_COMPUTE_32F;
  c.elem_ab = sizeof(TA);
  c.elem_c = sizeof(TC);
  c.ta = ta;
  c.tb = tb;
  c.M = M;
  c.N = N;
  c.K = K;
  c.A = A;
  c.lda = lda;
  c.stride_a = batch > 1 ? stride_a : 0;
  c.B = B;
  c.ldb = ldb;
  c.stride_b = batch > 1 ? stride_b : 0;
  c.C = C;
  c.D = C;
  c.ldc = ldc;
  c.stride_c = batch > 1 ? stride_c : 0;
  c.batch = batch;
  c.alpha = alpha;
  c.beta = beta;
  return c;
}

template <class TA, class TC, class S>
void gemm_any(queue& q, trans ta, trans tb, std::size_t M, std::size_t N, std::size_t K, S alpha, const TA* A,
              std::size_t lda, std::size_t stride_a, const TA* B, std::size_t ldb, std::size_t stride_b, S beta, TC* C,
              std::size_t ldc, std::size_t stride_c, std::size_t batch) {
  if (K == 0 || alpha == S(0)) return scale_matrices(q, batch, M, N, C, ldc, stride_c, beta);
  const lt_call c = make_call<TA, TC, S>(q, ta, tb, M, N, K, &alpha, A, lda, stride_a, B, ldb, stride_b, &beta, C,
                                         ldc, stride_c, batch);
  (void)lt_matmul(q, c);
}

}  // namespace detail

// Static members on arguments the front has checked (impl::gemm_kernels<queue>).
struct gemm_kernels {
  // Float uses exact FP32 math unless q.set_tf32(true).
  template <class T>
    requires detail::is_real_v<T>
  static void gemm(queue& q, trans trans_a, trans trans_b, std::size_t M, std::size_t N, std::size_t K, T alpha,
                   const T* A, std::size_t lda, const T* B, std::size_t ldb, T beta, T* C, std::size_t ldc) {
    detail::gemm_any<T, T, T>(q, trans_a, trans_b, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
  }

  // 16-bit operands, float or 16-bit output.
  template <class H, class Out>
    requires is_half16_v<H>
  static void gemm(queue& q, trans trans_a, trans trans_b, std::size_t M, std::size_t N, std::size_t K, float alpha,
                   const H* A, std::size_t lda, const H* B, std::size_t ldb, float beta, Out* C, std::size_t ldc) {
    detail::gemm_any<H, Out, float>(q, trans_a, trans_b, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
  }

  // One cuBLASLt call for the whole batch.
  template <class T>
    requires detail::is_real_v<T>
  static void gemm_strided_batched(queue& q, trans trans_a, trans trans_b, std::size_t M, std::size_t N,
                                   std::size_t K, T alpha, const T* A, std::size_t lda, std::size_t stride_a,
                                   const T* B, std::size_t ldb, std::size_t stride_b, T beta, T* C, std::size_t ldc,
                                   std::size_t stride_c, std::size_t batch) {
    detail::gemm_any<T, T, T>(q, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc,
                              stride_c, batch);
  }

  template <class H>
    requires is_half16_v<H>
  static void gemm_strided_batched(queue& q, trans trans_a, trans trans_b, std::size_t M, std::size_t N,
                                   std::size_t K, float alpha, const H* A, std::size_t lda, std::size_t stride_a,
                                   const H* B, std::size_t ldb, std::size_t stride_b, float beta, H* C,
                                   std::size_t ldc, std::size_t stride_c, std::size_t batch) {
    detail::gemm_any<H, H, float>(q, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C,
                                  ldc, stride_c, batch);
  }

  // The bias and the activation ride cuBLASLt's epilogue where it has one:
  //   none        BIAS epilogue (pre_out, if asked, is a copy of C)
  //   relu        RELU_BIAS; with pre_out: BIAS epilogue into pre_out, then relu
  //   gelu        GELU(_AUX)_BIAS when q.lt_gelu_epilogue(), else unfused
  // and fall back to the unfused pair (gemm, then the bias-activation kernel) when
  // cuBLASLt has no algorithm.
  template <class T>
  static void gemm_bias_act(queue& q, trans trans_a, trans trans_b, std::size_t M, std::size_t N, std::size_t K,
                            gemm_scalar_t<T> alpha, const T* A, std::size_t lda, const T* B, std::size_t ldb,
                            gemm_scalar_t<T> beta, T* C, std::size_t ldc, const T* bias, activation act, T* pre_out) {
    using S = gemm_scalar_t<T>;
    if (K == 0 || alpha == S(0)) {
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
      if (done && pre_out && pre_out != C)
        elementwise_kernels::copy_2d(q, M, N, static_cast<const T*>(C), ldc, pre_out, ldc);
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
};

}  // namespace strata::backend::cuda

namespace strata::backend::impl {
template <>
struct gemm_kernels<cuda::queue> : cuda::gemm_kernels {};
}  // namespace strata::backend::impl
