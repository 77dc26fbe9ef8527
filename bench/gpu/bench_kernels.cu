// strata CUDA backend benchmarks (nccl-tests style: warm-up, averaged timed
// iterations between two cudaEvents, a separate correctness pass, inputs
// rotated over enough buffer sets that L2 cannot hold them).
//
//  (a) Linear forward + backward through strata (gemm_bias_act, dgrad gemm,
//      wgrad gemm, bias_grad; and the fused gemm_wgrad_bias variant) against
//      the same cuBLASLt calls made directly with prebuilt plans. Ratio =
//      direct time / strata time (goal >= 0.97).
//  (b) Memory-bound kernels: achieved GB/s (compulsory bytes read + written
//      per call) against a large device-to-device cudaMemcpy measured in the
//      same run (2 x bytes / time). Ratio goal >= 0.80.
//
// Usage: bench_kernels [--out FILE.md] [--warmup N] [--iters N] [--quick]
// Writes a markdown table (device, driver, date, command) to FILE.md, or to
// $OUT/gpu_kernels.md when --out is not given and OUT is set.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "strata/backend/cuda/kernels.cuh"
#include "strata/backend/host/kernels.hpp"

namespace {

namespace cu = strata::backend::cuda;
namespace hb = strata::backend::host;
using strata::backend::activation;
using strata::backend::trans;

struct options {
  std::string out, command;
  int warmup = 5, iters = 20;
  bool quick = false;
};

struct result {
  std::string section, name, shape;
  double time_us = 0, gbps = 0, ratio = 0, goal = 0;
  std::string check;
};

std::mt19937_64 rng(12345);
template <class T>
std::vector<T> random_vec(std::size_t n, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = T(d(rng));
  return v;
}
template <class T>
cu::buffer<T> to_dev(cu::queue& q, const std::vector<T>& h) {
  cu::buffer<T> b(std::max<std::size_t>(h.size(), 1));
  cu::upload(q, h.data(), h.size(), b.data());
  return b;
}
template <class T>
std::vector<T> to_host(cu::queue& q, const T* d, std::size_t n) {
  std::vector<T> h(n);
  cu::download(q, d, n, h.data());
  q.synchronize();
  return h;
}
template <class A, class B>
double rel_err(const std::vector<A>& a, const std::vector<B>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}
std::string verdict(double err, double tol) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s (%.1e)", err <= tol ? "ok" : "FAIL", err);
  return buf;
}

// Mean time of one call in microseconds: warm-up calls, then `iters` calls
// between two timing events. f(i) must use buffer set i % sets.
double time_us(cu::queue& q, const options& o, const std::function<void(int)>& f) {
  for (int i = 0; i < o.warmup; ++i) f(i);
  cu::event start(true), stop(true);
  cu::record(q, start);
  for (int i = 0; i < o.iters; ++i) f(o.warmup + i);
  cu::record(q, stop);
  cu::synchronize(stop);
  return 1000.0 * double(cu::elapsed_ms(start, stop)) / o.iters;
}

// Enough buffer sets that consecutive calls never find their inputs in L2.
int rotation_sets(std::size_t bytes_per_set) {
  int dev = 0, l2 = 0;
  STRATA_CUDA_CHECK(cudaGetDevice(&dev));
  STRATA_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  std::size_t free_b = 0, total_b = 0;
  STRATA_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  int sets = int(std::max<std::size_t>(2, (3 * std::size_t(l2) + bytes_per_set - 1) / bytes_per_set));
  while (sets > 2 && std::size_t(sets) * bytes_per_set > free_b / 2) --sets;
  return sets;
}

// ---------------------------------------------------------------------------
// (a) Linear: strata vs direct cuBLASLt
// ---------------------------------------------------------------------------

// An independent cuBLASLt plan (built once, outside timing): what a caller
// hand-writing the three Linear products would do.
struct direct_matmul {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};

  // Column-major: D (m x n, ldc) = op(A) op(B); A stored (opA == N ? m x k : k x m).
  direct_matmul(cublasLtHandle_t lt, cublasComputeType_t compute, cublasOperation_t opa, cublasOperation_t opb,
                std::uint64_t m, std::uint64_t n, std::uint64_t k, std::int64_t lda, std::int64_t ldb,
                std::int64_t ldc, cublasLtEpilogue_t epi, const void* bias, std::size_t workspace) {
    STRATA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F));
    STRATA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    STRATA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    STRATA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (bias) {
      const std::int32_t type = CUDA_R_32F;
      STRATA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type, sizeof type));
      STRATA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a, CUDA_R_32F, opa == CUBLAS_OP_N ? m : k,
                                                   opa == CUBLAS_OP_N ? k : m, lda));
    STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b, CUDA_R_32F, opb == CUBLAS_OP_N ? k : n,
                                                   opb == CUBLAS_OP_N ? n : k, ldb));
    STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c, CUDA_R_32F, m, n, ldc));
    cublasLtMatmulPreference_t pref = nullptr;
    STRATA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const std::uint64_t ws = workspace;
    STRATA_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasLtMatmulHeuristicResult_t r{};
    int found = 0;
    STRATA_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, desc, a, b, c, c, pref, 1, &r, &found));
    STRATA_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (found == 0) throw std::runtime_error("direct cuBLASLt: no algorithm");
    algo = r.algo;
  }
  ~direct_matmul() {
    cublasLtMatmulDescDestroy(desc);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(c);
  }
  direct_matmul(const direct_matmul&) = delete;
  direct_matmul& operator=(const direct_matmul&) = delete;

  void run(cublasLtHandle_t lt, float beta, const void* A, const void* B, void* C, const void* bias, void* ws,
           std::size_t ws_bytes, cudaStream_t s) {
    const float alpha = 1.f;
    if (bias)
      STRATA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    STRATA_CUBLAS_CHECK(
        cublasLtMatmul(lt, desc, &alpha, A, a, B, b, &beta, C, c, C, c, &algo, ws, ws_bytes, s));
  }
};

void bench_linear(const options& o, std::vector<result>& out, std::size_t rows, std::size_t in, std::size_t outf,
                  bool tf32) {
  cu::queue q;
  q.set_tf32(tf32);
  const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const std::size_t ws_bytes = q.workspace_bytes();
  cu::buffer<unsigned char> ws(ws_bytes);  // the direct path's own workspace
  cublasLtHandle_t lt = nullptr;
  STRATA_CUBLAS_CHECK(cublasLtCreate(&lt));

  const std::size_t per_set = (rows * in * 2 + rows * outf * 2) * sizeof(float);
  const int sets = std::min(rotation_sets(per_set), 4);
  std::vector<cu::buffer<float>> X, Y, dY, dX;
  for (int s = 0; s < sets; ++s) {
    X.push_back(to_dev(q, random_vec<float>(rows * in)));
    dY.push_back(to_dev(q, random_vec<float>(rows * outf)));
    Y.emplace_back(rows * outf);
    dX.emplace_back(rows * in);
  }
  auto W = to_dev(q, random_vec<float>(in * outf, -0.05, 0.05));
  auto bias = to_dev(q, random_vec<float>(outf));
  cu::buffer<float> dW(in * outf), db(outf), dW2(in * outf), db2(outf);
  cu::fill(q, dW.size(), 0.f, dW.data());
  cu::fill(q, db.size(), 0.f, db.data());
  cu::fill(q, dW2.size(), 0.f, dW2.data());
  cu::fill(q, db2.size(), 0.f, db2.data());

  // Column-major views (see gemm.cuh): fwd Y^T = W^T X^T, dgrad dX^T = W dY^T,
  // wgrad dW^T += dY^T X.
  direct_matmul fwd(lt, compute, CUBLAS_OP_N, CUBLAS_OP_N, outf, rows, in, outf, in, outf, CUBLASLT_EPILOGUE_BIAS,
                    bias.data(), ws_bytes);
  direct_matmul dgrad(lt, compute, CUBLAS_OP_T, CUBLAS_OP_N, in, rows, outf, outf, outf, in,
                      CUBLASLT_EPILOGUE_DEFAULT, nullptr, ws_bytes);
  direct_matmul wgrad(lt, compute, CUBLAS_OP_N, CUBLAS_OP_T, outf, in, rows, outf, in, outf,
                      CUBLASLT_EPILOGUE_DEFAULT, nullptr, ws_bytes);
  std::unique_ptr<direct_matmul> wgrad_bg;
  try {
    wgrad_bg = std::make_unique<direct_matmul>(lt, compute, CUBLAS_OP_N, CUBLAS_OP_T, outf, in, rows, outf, in, outf,
                                               CUBLASLT_EPILOGUE_BGRADA, db2.data(), ws_bytes);
  } catch (const std::exception&) {
    wgrad_bg.reset();  // no BGRADA algorithm here: strata falls back too
  }

  const auto direct = [&](int i, bool fused_bias) {
    const int s = i % sets;
    fwd.run(lt, 0.f, W.data(), X[s].data(), Y[s].data(), bias.data(), ws.data(), ws_bytes, q.stream());
    dgrad.run(lt, 0.f, W.data(), dY[s].data(), dX[s].data(), nullptr, ws.data(), ws_bytes, q.stream());
    if (fused_bias && wgrad_bg)
      wgrad_bg->run(lt, 1.f, dY[s].data(), X[s].data(), dW2.data(), db2.data(), ws.data(), ws_bytes, q.stream());
    else
      wgrad.run(lt, 1.f, dY[s].data(), X[s].data(), dW2.data(), nullptr, ws.data(), ws_bytes, q.stream());
  };
  const auto strata_linear = [&](int i, bool fused_bias) {
    const int s = i % sets;
    cu::gemm_bias_act(q, trans::N, trans::N, rows, outf, in, 1.f, X[s].data(), in, W.data(), outf, 0.f, Y[s].data(),
                      outf, bias.data(), activation::none, static_cast<float*>(nullptr));
    cu::gemm(q, trans::N, trans::T, rows, in, outf, 1.f, dY[s].data(), outf, W.data(), outf, 0.f, dX[s].data(), in);
    if (fused_bias) {
      cu::gemm_wgrad_bias(q, rows, in, outf, X[s].data(), in, dY[s].data(), outf, 1.f, dW.data(), outf, db.data(),
                          true);
    } else {
      cu::gemm(q, trans::T, trans::N, in, outf, rows, 1.f, X[s].data(), in, dY[s].data(), outf, 1.f, dW.data(), outf);
      cu::bias_grad(q, rows, outf, dY[s].data(), db.data(), true);
    }
  };

  // Correctness pass: one step each from zeroed gradients; strata vs direct
  // (same algorithms: expect ~0), bias gradient vs the host reference.
  strata_linear(0, false);
  const auto y1 = to_host(q, Y[0].data(), Y[0].size());
  const auto dx1 = to_host(q, dX[0].data(), dX[0].size());
  const auto dw1 = to_host(q, dW.data(), dW.size());
  const auto db1 = to_host(q, db.data(), db.size());
  direct(0, false);
  const auto y2 = to_host(q, Y[0].data(), Y[0].size());
  const auto dx2 = to_host(q, dX[0].data(), dX[0].size());
  const auto dw2 = to_host(q, dW2.data(), dW2.size());
  const auto hdy = to_host(q, dY[0].data(), dY[0].size());
  std::vector<float> hdb(outf, 0.f);
  hb::queue hq;
  hb::bias_grad(hq, rows, outf, hdy.data(), hdb.data(), false);
  const double err = std::max({rel_err(y1, y2), rel_err(dx1, dx2), rel_err(dw1, dw2), rel_err(db1, hdb)});
  const std::string check = verdict(err, 1e-5);

  const double t_direct = time_us(q, o, [&](int i) { direct(i, false); });
  const double t_strata = time_us(q, o, [&](int i) { strata_linear(i, false); });
  const double t_direct_bg = time_us(q, o, [&](int i) { direct(i, true); });
  const double t_strata_bg = time_us(q, o, [&](int i) { strata_linear(i, true); });
  STRATA_CUBLAS_CHECK(cublasLtDestroy(lt));

  const double flops = 3.0 * 2.0 * double(rows) * double(in) * double(outf);
  char shape[96];
  std::snprintf(shape, sizeof shape, "rows %zu, in %zu, out %zu, %s", rows, in, outf, tf32 ? "TF32" : "FP32");
  result r;
  r.section = "linear";
  r.shape = shape;
  r.check = check;
  r.goal = 0.97;
  r.name = "direct cuBLASLt (fwd+BIAS, dgrad, wgrad)";
  r.time_us = t_direct;
  r.gbps = flops / t_direct / 1e6;  // TFLOP/s
  r.ratio = 1.0;
  out.push_back(r);
  r.name = "strata gemm_bias_act + gemm + gemm + bias_grad";
  r.time_us = t_strata;
  r.gbps = flops / t_strata / 1e6;
  r.ratio = t_direct / t_strata;
  out.push_back(r);
  r.name = wgrad_bg ? "direct cuBLASLt (wgrad with BGRADA)" : "direct cuBLASLt (no BGRADA algorithm)";
  r.time_us = t_direct_bg;
  r.gbps = flops / t_direct_bg / 1e6;
  r.ratio = 1.0;
  out.push_back(r);
  r.name = "strata gemm_bias_act + gemm + gemm_wgrad_bias";
  r.time_us = t_strata_bg;
  r.gbps = flops / t_strata_bg / 1e6;
  r.ratio = t_direct_bg / t_strata_bg;
  out.push_back(r);
  std::printf("linear %-40s direct %9.1f us  strata %9.1f us  ratio %.3f | fused bias: %9.1f / %9.1f us ratio %.3f  %s\n",
              shape, t_direct, t_strata, t_direct / t_strata, t_direct_bg, t_strata_bg, t_direct_bg / t_strata_bg,
              check.c_str());
}

// ---------------------------------------------------------------------------
// (b) Memory-bound kernels vs cudaMemcpy
// ---------------------------------------------------------------------------

double memcpy_gbps(const options& o, cu::queue& q, double& us) {
  const std::size_t bytes = std::size_t(1) << 30;  // 1 GiB per copy
  const int sets = 2;
  std::vector<cu::buffer<unsigned char>> src, dst;
  for (int s = 0; s < sets; ++s) {
    src.emplace_back(bytes);
    dst.emplace_back(bytes);
    STRATA_CUDA_CHECK(cudaMemsetAsync(src.back().data(), 1, bytes, q.stream()));
  }
  us = time_us(q, o, [&](int i) {
    STRATA_CUDA_CHECK(
        cudaMemcpyAsync(dst[i % sets].data(), src[i % sets].data(), bytes, cudaMemcpyDeviceToDevice, q.stream()));
  });
  return 2.0 * double(bytes) / us / 1e3;
}

struct membench {
  std::string name, shape;
  std::size_t bytes = 0;  // compulsory bytes per call
  std::function<void(int)> run;
  std::string check;
};

void add_result(std::vector<result>& out, const membench& m, double us, double ref_gbps) {
  result r;
  r.section = "memory";
  r.name = m.name;
  r.shape = m.shape;
  r.time_us = us;
  r.gbps = double(m.bytes) / us / 1e3;
  r.ratio = r.gbps / ref_gbps;
  r.goal = 0.80;
  r.check = m.check;
  out.push_back(r);
  std::printf("%-34s %-22s %9.1f us %8.1f GB/s  ratio %.3f  %s\n", m.name.c_str(), m.shape.c_str(), us, r.gbps,
              r.ratio, m.check.c_str());
}

void bench_memory(const options& o, std::vector<result>& out) {
  cu::queue q;
  hb::queue hq;
  double memcpy_us = 0;
  const double ref = memcpy_gbps(o, q, memcpy_us);
  {
    result r;
    r.section = "memory";
    r.name = "cudaMemcpy device-to-device (reference)";
    r.shape = "1 GiB";
    r.time_us = memcpy_us;
    r.gbps = ref;
    r.ratio = 1.0;
    out.push_back(r);
    std::printf("%-34s %-22s %9.1f us %8.1f GB/s\n", r.name.c_str(), r.shape.c_str(), memcpy_us, ref);
  }
  const std::size_t R = o.quick ? 4096 : 16384, D = 1024;
  const std::size_t n = R * D;
  char shape[64];
  std::snprintf(shape, sizeof shape, "%zu x %zu fp32", R, D);

  // One rotation of inputs/outputs; every benchmark below uses these.
  const int sets = rotation_sets(4 * n * sizeof(float));
  std::vector<cu::buffer<float>> A, B, C, E;
  for (int s = 0; s < sets; ++s) {
    A.push_back(to_dev(q, random_vec<float>(n, -2, 2)));
    B.push_back(to_dev(q, random_vec<float>(n)));
    C.emplace_back(n);
    E.emplace_back(n);
  }
  auto bias = to_dev(q, random_vec<float>(D));
  auto gamma = to_dev(q, random_vec<float>(D, 0.5, 1.5)), beta = to_dev(q, random_vec<float>(D));
  cu::buffer<float> mean(R), rstd(R), dgamma(D), dbeta(D), loss(R);
  std::vector<std::int32_t> labels_h(R);
  for (std::size_t r = 0; r < R; ++r) labels_h[r] = std::int32_t((r * 7919) % D);
  auto labels = to_dev(q, labels_h);

  // Small correctness pass against the host kernels (first 64 rows).
  const std::size_t cr = 64, cn = cr * D;
  const auto hx = to_host(q, A[0].data(), cn), hdy = to_host(q, B[0].data(), cn);
  const auto hbias = to_host(q, bias.data(), D), hgam = to_host(q, gamma.data(), D), hbet = to_host(q, beta.data(), D);
  const auto check = [&](const float* dev, const std::vector<float>& ref, double tol) {
    return verdict(rel_err(to_host(q, dev, ref.size()), ref), tol);
  };

  std::vector<membench> benches;
  {
    membench m{"bias_activation_forward (GeLU, pre)", shape, 3 * n * sizeof(float) + D * sizeof(float), {}, {}};
    m.run = [&](int i) {
      const int s = i % sets;
      cu::bias_activation_forward(q, activation::gelu, R, D, A[s].data(), bias.data(), C[s].data(), E[s].data());
    };
    std::vector<float> pre(cn), y(cn);
    hb::bias_activation_forward(hq, activation::gelu, cr, D, hx.data(), hbias.data(), pre.data(), y.data());
    m.run(0);
    m.check = check(E[0].data(), y, 1e-5);
    benches.push_back(std::move(m));
  }
  {
    membench m{"activation_backward (GeLU)", shape, 3 * n * sizeof(float), {}, {}};
    m.run = [&](int i) {
      const int s = i % sets;
      cu::activation_backward(q, activation::gelu, n, static_cast<const float*>(A[s].data()), B[s].data(), C[s].data());
    };
    std::vector<float> g(cn);
    hb::activation_backward(hq, activation::gelu, cn, hx.data(), hdy.data(), g.data());
    m.run(0);
    m.check = check(C[0].data(), g, 1e-5);
    benches.push_back(std::move(m));
  }
  {
    membench m{"layernorm_forward", shape, 2 * n * sizeof(float) + 2 * (D + R) * sizeof(float), {}, {}};
    m.run = [&](int i) {
      const int s = i % sets;
      cu::layernorm_forward(q, R, D, A[s].data(), gamma.data(), beta.data(), 1e-5, C[s].data(), mean.data(),
                            rstd.data());
    };
    std::vector<float> y(cn), mu(cr), rs(cr);
    hb::layernorm_forward(hq, cr, D, hx.data(), hgam.data(), hbet.data(), 1e-5, y.data(), mu.data(), rs.data());
    m.run(0);
    m.check = check(C[0].data(), y, 1e-5);
    benches.push_back(std::move(m));
  }
  {
    membench m{"layernorm_backward (dx, dgamma, dbeta)", shape, 3 * n * sizeof(float) + (3 * D + 2 * R) * sizeof(float),
               {}, {}};
    m.run = [&](int i) {
      const int s = i % sets;
      cu::layernorm_backward(q, R, D, A[s].data(), gamma.data(), mean.data(), rstd.data(), B[s].data(), C[s].data(),
                             dgamma.data(), dbeta.data(), true);
    };
    // Check on the first rows: statistics from the device forward of set 0.
    cu::layernorm_forward(q, R, D, A[0].data(), gamma.data(), beta.data(), 1e-5, E[0].data(), mean.data(), rstd.data());
    const auto hmu = to_host(q, mean.data(), cr), hrs = to_host(q, rstd.data(), cr);
    std::vector<float> dx(cn);
    hb::layernorm_backward(hq, cr, D, hx.data(), hgam.data(), hmu.data(), hrs.data(), hdy.data(), dx.data(),
                           static_cast<float*>(nullptr), static_cast<float*>(nullptr), false);
    m.run(0);
    m.check = check(C[0].data(), dx, 1e-5);
    benches.push_back(std::move(m));
  }
  {
    membench m{"softmax_cross_entropy_forward (probs)", shape, 2 * n * sizeof(float) + 2 * R * 4, {}, {}};
    m.run = [&](int i) {
      const int s = i % sets;
      cu::softmax_cross_entropy_forward(q, R, D, A[s].data(), labels.data(), loss.data(), C[s].data());
    };
    std::vector<float> l(cr), p(cn);
    hb::softmax_cross_entropy_forward(hq, cr, D, hx.data(), labels_h.data(), l.data(), p.data());
    m.run(0);
    m.check = check(C[0].data(), p, 1e-5);
    benches.push_back(std::move(m));
  }
  {
    membench m{"softmax_cross_entropy_backward", shape, 2 * n * sizeof(float) + R * 4, {}, {}};
    m.run = [&](int i) {
      const int s = i % sets;
      cu::softmax_cross_entropy_backward(q, R, D, static_cast<const float*>(A[s].data()), labels.data(), 0.5,
                                         C[s].data());
    };
    std::vector<float> d(cn);
    hb::softmax_cross_entropy_backward(hq, cr, D, hx.data(), labels_h.data(), 0.5, d.data());
    m.run(0);
    m.check = check(C[0].data(), d, 1e-5);
    benches.push_back(std::move(m));
  }
  {
    membench m{"adam_step", shape, 7 * n * sizeof(float), {}, {}};
    // param = A, grad = B, m = C, v = E (values drift; bandwidth does not care)
    for (int s = 0; s < sets; ++s) {
      cu::fill(q, n, 0.f, C[s].data());
      cu::fill(q, n, 0.f, E[s].data());
    }
    m.run = [&](int i) {
      const int s = i % sets;
      cu::adam_step(q, n, 1e-3, 0.9, 0.999, 1e-8, 0.01, 1 + i / sets, A[s].data(),
                    static_cast<const float*>(B[s].data()), C[s].data(), E[s].data(), true);
    };
    std::vector<float> p(hx.begin(), hx.begin() + cn), mm(cn, 0.f), vv(cn, 0.f);
    hb::adam_step(hq, cn, 1e-3, 0.9, 0.999, 1e-8, 0.01, 1, p.data(), hdy.data(), mm.data(), vv.data(), true);
    m.run(0);
    m.check = check(A[0].data(), p, 1e-5);
    benches.push_back(std::move(m));
  }
  // Many tensors (a model's parameter list): per-tensor launches vs one fused
  // multi-tensor launch over the same bytes.
  std::vector<std::vector<cu::update_tensor<float>>> lists(sets);
  std::size_t tensors = 0;
  for (int s = 0; s < sets; ++s) {
    std::size_t off = 0;
    for (std::size_t k = 0; off < n; ++k) {
      const std::size_t sz = std::min(n - off, (k % 3 == 0) ? D : (k % 3 == 1 ? 4 * D * D / 16 : D * D / 8));
      lists[s].push_back({A[s].data() + off, B[s].data() + off, C[s].data() + off, E[s].data() + off, sz});
      off += sz;
    }
    tensors = lists[s].size();
  }
  char mshape[64];
  std::snprintf(mshape, sizeof mshape, "%zu tensors, %zu fp32", tensors, n);
  {
    membench m{"adam_step per tensor (loop)", mshape, 7 * n * sizeof(float), {}, "(same kernel)"};
    m.run = [&](int i) {
      for (const auto& t : lists[i % sets])
        cu::adam_step(q, t.n, 1e-3, 0.9, 0.999, 1e-8, 0.01, 1 + i / sets, t.param, t.grad, t.s0, t.s1, true);
    };
    benches.push_back(std::move(m));
  }
  {
    membench m{"optimizer_update_multi<AdamW> (fused)", mshape, 7 * n * sizeof(float), {}, "(same kernel)"};
    m.run = [&](int i) {
      const strata::AdamW adam{.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
      cu::optimizer_update_multi<strata::AdamW, float>(q, lists[i % sets], adam.prepare<float>(1.0, true, 1 + i / sets));
    };
    benches.push_back(std::move(m));
  }
  cu::raise_device_errors(q);
  for (const auto& m : benches) add_result(out, m, time_us(q, o, m.run), ref);
}

// ---------------------------------------------------------------------------

std::string markdown(const options& o, const std::vector<result>& rs) {
  int dev = 0, driver = 0, runtime = 0;
  STRATA_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  STRATA_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  STRATA_CUDA_CHECK(cudaDriverGetVersion(&driver));
  STRATA_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  char date[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  std::ostringstream md;
  md << "# strata CUDA backend kernel benchmarks\n\n";
  md << "- device: " << prop.name << " (" << prop.multiProcessorCount << " SMs, L2 " << (prop.l2CacheSize >> 20)
     << " MiB)\n";
  md << "- driver: " << driver / 1000 << "." << (driver % 1000) / 10 << ", runtime " << runtime / 1000 << "."
     << (runtime % 1000) / 10 << "\n";
  md << "- date: " << date << "\n";
  md << "- command: `" << o.command << "`\n";
  md << "- timing: " << o.warmup << " warm-up + " << o.iters
     << " timed calls between cudaEvents, inputs rotated across buffer sets larger than L2\n\n";
  md << "## (a) Linear forward + backward: strata vs direct cuBLASLt (goal: ratio >= 0.97)\n\n";
  md << "| variant | shape | time (us) | TFLOP/s | ratio direct/strata | check |\n|---|---|---:|---:|---:|---|\n";
  char line[512];
  for (const auto& r : rs)
    if (r.section == "linear") {
      std::snprintf(line, sizeof line, "| %s | %s | %.1f | %.1f | %.3f%s | %s |\n", r.name.c_str(), r.shape.c_str(),
                    r.time_us, r.gbps, r.ratio, (r.ratio < r.goal && r.name.rfind("strata", 0) == 0) ? " (below goal)" : "",
                    r.check.c_str());
      md << line;
    }
  md << "\n## (b) Memory-bound kernels vs device-to-device cudaMemcpy (goal: ratio >= 0.80)\n\n";
  md << "Bytes are the compulsory traffic of one call (inputs read once, outputs written once).\n\n";
  md << "| kernel | shape | time (us) | GB/s | ratio to memcpy | check |\n|---|---|---:|---:|---:|---|\n";
  for (const auto& r : rs)
    if (r.section == "memory") {
      std::snprintf(line, sizeof line, "| %s | %s | %.1f | %.1f | %.3f%s | %s |\n", r.name.c_str(), r.shape.c_str(),
                    r.time_us, r.gbps, r.ratio, (r.goal > 0 && r.ratio < r.goal) ? " (below goal)" : "",
                    r.check.c_str());
      md << line;
    }
  return md.str();
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 0; i < argc; ++i) o.command += (i ? " " : "") + std::string(argv[i]);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--out" && i + 1 < argc)
      o.out = argv[++i];
    else if (a == "--warmup" && i + 1 < argc)
      o.warmup = std::max(1, std::atoi(argv[++i]));
    else if (a == "--iters" && i + 1 < argc)
      o.iters = std::max(1, std::atoi(argv[++i]));
    else if (a == "--quick")
      o.quick = true;
    else {
      std::fprintf(stderr, "usage: %s [--out FILE.md] [--warmup N] [--iters N] [--quick]\n", argv[0]);
      return 2;
    }
  }
  if (o.out.empty())
    if (const char* dir = std::getenv("OUT"); dir && *dir) o.out = std::string(dir) + "/gpu_kernels.md";
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("no CUDA device: skipping");
    return 77;
  }
  try {
    std::vector<result> rs;
    if (o.quick) {
      bench_linear(o, rs, 4096, 1024, 1024, true);
    } else {
      bench_linear(o, rs, 8192, 4096, 4096, true);
      bench_linear(o, rs, 16384, 1024, 4096, true);
      bench_linear(o, rs, 4096, 1024, 1024, false);
    }
    bench_memory(o, rs);
    const std::string md = markdown(o, rs);
    if (!o.out.empty()) {
      std::ofstream f(o.out);
      f << md;
      std::printf("wrote %s\n", o.out.c_str());
    } else {
      std::fputs(md.c_str(), stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_kernels: %s\n", e.what());
    return 1;
  }
  return 0;
}
