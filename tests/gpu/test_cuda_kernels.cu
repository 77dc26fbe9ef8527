// requires: cuda
// What only the CUDA backend has (every kernel's values against float64 references
// are the kernel suite's, test_kernels_cuda.cu): TF32 GEMMs, cuBLASLt's fused GELU
// epilogue, gemm_wgrad_bias, bf16 kernels the host has no form of (batched GEMM,
// scale, axpy), the device error word (raise_device_errors) and check_ids (the
// convolution family and batch normalisation: test_cuda_images.cu), pageable host memory where kernels accept it, multi-tensor optimizers, the arena (no
// cudaMalloc after warm-up), CUDA Graphs, events, and the error messages of
// STRATA_CUDA_CHECK / STRATA_CUBLAS_CHECK / STRATA_CUDA_CHECK_LAUNCH. The reference
// is the host backend, fed the same inputs; outputs are poisoned with NaN first.
//
// Tolerances (norm-wise relative error ||dev - host|| / ||host||):
//   float  1e-5   (different summation orders, expf/tanhf vs libm, FMA)
//   double 1e-12
//   TF32   5e-3   (10-bit mantissa products)
//   bf16   2e-2   (8-bit mantissa storage; compared with the host's float
//                  result on the same bf16-rounded inputs)
//   cuBLASLt's fused GELU epilogue: 1e-3 (its formula is not documented
//   beyond "GELU"; the default, unfused path is the suite's, at 1e-5)
//   gemm_wgrad_bias's bias gradient (float): 1e-4 (summed in FP32 by the
//   GEMM epilogue, where bias_grad sums in double)
// Exit code 77 (ctest: skipped) when there is no CUDA device.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/backend/cuda/kernels.cuh"
#include "strata/backend/host/kernels.hpp"

#include "cuda_vs_host.hpp"

namespace {

const char* name(activation a) { return a == activation::none ? "none" : a == activation::relu ? "relu" : "gelu"; }

struct gemm_shape {
  std::size_t M, N, K;
};
const gemm_shape gemm_shapes[] = {{1, 1, 1}, {3, 5, 7}, {17, 33, 9}, {64, 128, 96}, {129, 65, 257}, {250, 3, 1000}};

}  // namespace

// ---------------------------------------------------------------------------
// GEMM: TF32, bf16 batched, cuBLASLt epilogues
// ---------------------------------------------------------------------------

TEST_CASE("gemm in TF32 mode stays within TF32 accuracy") {
  fixture f;
  f.q.set_tf32(true);
  for (const auto& s : gemm_shapes) {
    auto A = random_vec<float>(s.M * s.K), B = random_vec<float>(s.K * s.N);
    auto dA = to_dev(f.q, A), dB = to_dev(f.q, B);
    auto dC = poisoned<float>(f.q, s.M * s.N);
    std::vector<float> ref(s.M * s.N);
    hb::gemm(f.hq, trans::N, trans::N, s.M, s.N, s.K, 1.f, A.data(), s.K, B.data(), s.N, 0.f, ref.data(), s.N);
    cu::gemm(f.q, trans::N, trans::N, s.M, s.N, s.K, 1.f, dA.data(), s.K, dB.data(), s.N, 0.f, dC.data(), s.N);
    expect_close(to_host(f.q, dC, s.M * s.N), ref, tol_tf32, "tf32 K=" + std::to_string(s.K));
  }
}

TEST_CASE("bf16 gemm_strided_batched (FP32 accumulate, bf16 out) in one cuBLASLt call") {
  fixture f;
  const std::size_t M = 8, N = 16, K = 24, batch = 3;
  auto A = round_bf16(random_vec<float>(M * K * batch)), B = round_bf16(random_vec<float>(K * N * batch));
  auto dA = to_dev(f.q, to_bf16(A)), dB = to_dev(f.q, to_bf16(B));
  auto dC = poisoned<bf16>(f.q, M * N * batch);
  std::vector<float> ref(M * N * batch);
  hb::gemm_strided_batched(f.hq, trans::N, trans::N, M, N, K, 1.f, A.data(), K, M * K, B.data(), N, K * N, 0.f,
                           ref.data(), N, M * N, batch);
  cu::gemm_strided_batched(f.q, trans::N, trans::N, M, N, K, 1.f, dA.data(), K, M * K, dB.data(), N, K * N, 0.f,
                           dC.data(), N, M * N, batch);
  expect_close(to_host(f.q, dC, M * N * batch), ref, tol_bf16, "bf16 batched");
}

TEST_CASE_TEMPLATE("gemm_bias_act with cuBLASLt's GELU epilogue", T, float, double) {
  fixture f;
  f.q.set_lt_gelu_epilogue(true);
  for (const auto& s : gemm_shapes)
    for (activation act : {activation::none, activation::relu, activation::gelu})
      for (int with_bias = 0; with_bias < 2; ++with_bias)
        for (int with_pre = 0; with_pre < 2; ++with_pre) {
          const std::size_t ldc = s.N % 8 == 0 ? s.N : s.N + 1;  // the aux output needs ldc % 8 == 0
          auto A = random_vec<T>(s.M * s.K), B = random_vec<T>(s.K * s.N), bias = random_vec<T>(s.N);
          auto dA = to_dev(f.q, A), dB = to_dev(f.q, B), dbias = to_dev(f.q, bias);
          auto dC = poisoned<T>(f.q, s.M * ldc), dP = poisoned<T>(f.q, s.M * ldc);
          std::vector<T> ref(s.M * s.N), pre(s.M * s.N);
          hb::gemm(f.hq, trans::N, trans::N, s.M, s.N, s.K, T(1), A.data(), s.K, B.data(), s.N, T(0), ref.data(),
                   s.N);
          hb::bias_activation_forward(f.hq, act, s.M, s.N, ref.data(), with_bias ? bias.data() : nullptr,
                                      pre.data(), ref.data());
          cu::gemm_bias_act(f.q, trans::N, trans::N, s.M, s.N, s.K, T(1), dA.data(), s.K, dB.data(), s.N, T(0),
                            dC.data(), ldc, with_bias ? dbias.data() : nullptr, act,
                            with_pre ? dP.data() : static_cast<T*>(nullptr));
          const auto unpad = [&](const std::vector<T>& v) {
            std::vector<T> o(s.M * s.N);
            for (std::size_t r = 0; r < s.M; ++r)
              for (std::size_t c = 0; c < s.N; ++c) o[r * s.N + c] = v[r * ldc + c];
            return o;
          };
          const double t = act != activation::gelu         ? tol<T>
                           : std::is_same_v<T, float>         ? tol_lt_gelu
                                                              : tol_lt_gelu_double;
          const std::string what = std::string("gemm_bias_act ") + name(act) + " bias=" + std::to_string(with_bias) +
                                   " pre=" + std::to_string(with_pre) + " K=" + std::to_string(s.K);
          expect_close(unpad(to_host(f.q, dC, s.M * ldc)), ref, std::max(t, tol<T>), what);
          if (with_pre) expect_close(unpad(to_host(f.q, dP, s.M * ldc)), pre, tol<T>, what + " (pre)");
        }
}

TEST_CASE_TEMPLATE("gemm_wgrad_bias equals wgrad gemm + bias_grad", T, float, double) {
  fixture f;
  // The fused bias gradient sums in the GEMM's FP32 compute type (not double).
  const double tol_bias = std::is_same_v<T, float> ? 1e-4 : 1e-12;
  for (const auto& s : gemm_shapes)
    for (bool accumulate : {false, true}) {
      const std::size_t rows = s.M, K = s.K, N = s.N;
      auto X = random_vec<T>(rows * K), dY = random_vec<T>(rows * N), W0 = random_vec<T>(K * N),
           b0 = random_vec<T>(N);
      std::vector<T> dW = W0, db = b0;
      hb::gemm(f.hq, trans::T, trans::N, K, N, rows, T(1), X.data(), K, dY.data(), N, T(1), dW.data(), N);
      hb::bias_grad(f.hq, rows, N, dY.data(), db.data(), accumulate);
      auto dX = to_dev(f.q, X), ddY = to_dev(f.q, dY), ddW = to_dev(f.q, W0);
      auto ddb = accumulate ? to_dev(f.q, b0) : poisoned<T>(f.q, N);
      cu::gemm_wgrad_bias(f.q, rows, K, N, dX.data(), K, ddY.data(), N, T(1), ddW.data(), N, ddb.data(), accumulate);
      const std::string what = "rows=" + std::to_string(rows) + " K=" + std::to_string(K) + " N=" + std::to_string(N) +
                               " acc=" + std::to_string(accumulate);
      expect_close(to_host(f.q, ddW, K * N), dW, tol<T>, "dW " + what);
      expect_close(to_host(f.q, ddb, N), db, tol_bias, "dbias " + what);
    }
}

// ---------------------------------------------------------------------------
// bf16 BLAS-1 (the host has float and double forms only)
// ---------------------------------------------------------------------------

TEST_CASE("bf16 scale and axpy compute in float and round once") {
  fixture f;
  for (std::size_t n : {std::size_t(1), std::size_t(7), std::size_t(33000), std::size_t(3000001)}) {
    auto x = round_bf16(random_vec<float>(n, -3, 3)), y = round_bf16(random_vec<float>(n));
    std::vector<float> sx = x, ay = y;
    hb::scale(f.hq, n, 0.75, sx.data());
    hb::axpy(f.hq, n, -2.0, x.data(), ay.data());
    auto ds = to_dev(f.q, to_bf16(x)), dx = to_dev(f.q, to_bf16(x)), da = to_dev(f.q, to_bf16(y));
    cu::scale(f.q, n, 0.75, ds.data());
    cu::axpy(f.q, n, -2.0, static_cast<const bf16*>(dx.data()), da.data());
    expect_close(to_host(f.q, ds, n), sx, tol_bf16, "bf16 scale n=" + std::to_string(n));
    expect_close(to_host(f.q, da, n), ay, tol_bf16, "bf16 axpy n=" + std::to_string(n));
    if (n > 2) {  // misaligned starts take the scalar paths
      auto d2 = to_dev(f.q, to_bf16(x));
      cu::scale(f.q, n - 1, 0.75, d2.data() + 1);
      expect_close(to_host(f.q, d2.data() + 1, n - 1), std::vector<float>(sx.begin() + 1, sx.end()), tol_bf16,
                   "bf16 scale offset n=" + std::to_string(n));
    }
  }
}

// ---------------------------------------------------------------------------
// Device errors, ids, pageable host memory
// ---------------------------------------------------------------------------

TEST_CASE("invalid labels: NaN rows on the device, the host's exception from raise_device_errors") {
  fixture f;
  const std::size_t rows = 6, cols = 10;
  auto logits = random_vec<float>(rows * cols);
  std::vector<std::int32_t> labels = {1, 2, 3, 12, -1, 4};  // first offender: row 3
  auto dlog = to_dev(f.q, logits);
  auto dlab = to_dev(f.q, labels);
  auto dloss = poisoned<float>(f.q, rows);
  cu::raise_device_errors(f.q);  // clean to start with
  cu::softmax_cross_entropy_forward(f.q, rows, cols, dlog.data(), dlab.data(), dloss.data(), static_cast<float*>(nullptr));
  const auto loss = to_host(f.q, dloss, rows);
  CHECK(std::isnan(loss[3]));
  CHECK(std::isnan(loss[4]));
  CHECK(std::isfinite(loss[0]));
  std::string host_msg, dev_msg;
  try {
    std::vector<float> l(rows);
    hb::softmax_cross_entropy_forward(f.hq, rows, cols, logits.data(), labels.data(), l.data(),
                                      static_cast<float*>(nullptr));
  } catch (const std::out_of_range& e) {
    host_msg = e.what();
  }
  try {
    cu::raise_device_errors(f.q);
  } catch (const std::out_of_range& e) {
    dev_msg = e.what();
  }
  CHECK(!host_msg.empty());
  CHECK(dev_msg == host_msg);
  CHECK_NOTHROW(cu::raise_device_errors(f.q));  // cleared
}

TEST_CASE("check_ids: device and host ids, the host's message") {
  fixture f;
  const std::size_t vocab = 50;
  auto ok = random_ids(1000, 0, std::int32_t(vocab));
  auto dok = to_dev(f.q, ok);
  CHECK_NOTHROW(cu::check_ids(f.q, dok.data(), ok.size(), vocab));
  CHECK_NOTHROW(cu::check_ids(f.q, ok.data(), ok.size(), vocab));  // pageable host memory
  auto bad = ok;
  bad[700] = 50;
  bad[901] = -3;
  auto dbad = to_dev(f.q, bad);
  std::string host_msg, dev_msg, host_ptr_msg;
  try {
    hb::check_ids(bad.data(), bad.size(), vocab);
  } catch (const std::out_of_range& e) {
    host_msg = e.what();
  }
  try {
    cu::check_ids(f.q, dbad.data(), bad.size(), vocab);
  } catch (const std::out_of_range& e) {
    dev_msg = e.what();
  }
  try {
    cu::check_ids(f.q, bad.data(), bad.size(), vocab);
  } catch (const std::out_of_range& e) {
    host_ptr_msg = e.what();
  }
  CHECK(host_msg.find("position 700") != std::string::npos);
  CHECK(dev_msg == host_msg);
  CHECK(host_ptr_msg == host_msg);
}

TEST_CASE_TEMPLATE("all_finite, copy and copy_2d accept pageable host memory", T, float, double, bf16) {
  fixture f;
  for (std::size_t n : {std::size_t(1), std::size_t(1000), std::size_t(65537)}) {
    std::vector<T> x(n, T(0.5f));
    CHECK(cu::all_finite(f.q, n, static_cast<const T*>(x.data())));
    x[n - 1] = T(std::numeric_limits<float>::infinity());
    CHECK_FALSE(cu::all_finite(f.q, n, static_cast<const T*>(x.data())));
    x[n - 1] = T(std::numeric_limits<float>::quiet_NaN());
    CHECK_FALSE(cu::all_finite(f.q, n, static_cast<const T*>(x.data())));
  }
  // Host to device, and device back to host.
  const std::size_t rows = 5, cols = 7, ls = 11, ld = 9;
  std::vector<T> src(rows * ls);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = T(float(i));
  auto ddst = poisoned<T>(f.q, rows * ld);
  cu::copy_2d(f.q, rows, cols, static_cast<const T*>(src.data()), ls, ddst.data(), ld);
  std::vector<T> back(rows * ld, T(-1.0f));
  cu::copy(f.q, rows * ld, static_cast<const T*>(ddst.data()), back.data());
  f.q.synchronize();
  bool same = true;
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < ld; ++c)
      same &= c < cols ? as_double(back[r * ld + c]) == as_double(src[r * ls + c])
                       : std::isnan(as_double(back[r * ld + c]));
  CHECK(same);
}

// ---------------------------------------------------------------------------
// Multi-tensor optimizers
// ---------------------------------------------------------------------------

TEST_CASE_TEMPLATE("multi-tensor adam and sgd equal per-tensor host updates", T, float, double) {
  fixture f;
  // 70 tensors (two launches), odd sizes, an empty one, and misaligned views.
  std::vector<std::size_t> sizes;
  for (int i = 0; i < 70; ++i) sizes.push_back(std::size_t((i * 7919) % 40000) + (i % 3 == 0 ? 1 : 0));
  sizes[5] = 0;
  std::size_t total = 0;
  for (auto s : sizes) total += s + 1;  // +1: the next tensor starts one element later (misaligned)
  auto p = random_vec<T>(total), m = std::vector<T>(total, T(0)), v = std::vector<T>(total, T(0));
  auto dp = to_dev(f.q, p), dm = to_dev(f.q, m), dv = to_dev(f.q, v);
  auto ps = p, vs = std::vector<T>(total, T(0));
  auto dps = to_dev(f.q, ps), dvs = to_dev(f.q, vs);
  for (std::int64_t step = 1; step <= 2; ++step) {
    auto g = random_vec<T>(total);
    auto dg = to_dev(f.q, g);
    std::vector<cu::update_tensor<T>> at, st;
    std::size_t off = 0;
    for (auto s : sizes) {
      hb::adam_step(f.hq, s, 1e-2, 0.9, 0.999, 1e-8, 0.01, step, p.data() + off, g.data() + off, m.data() + off,
                    v.data() + off, true);
      hb::sgd_momentum_step(f.hq, s, 0.05, 0.9, 0.001, ps.data() + off, g.data() + off, vs.data() + off);
      at.push_back({dp.data() + off, dg.data() + off, dm.data() + off, dv.data() + off, s});
      st.push_back({dps.data() + off, dg.data() + off, dvs.data() + off, nullptr, s});
      off += s + 1;
    }
    const strata::AdamW adam{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
    const strata::SGD sgd{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.001};
    cu::optimizer_update_multi<strata::AdamW, T>(f.q, at, adam.prepare<T>(1.0, true, step));
    cu::optimizer_update_multi<strata::SGD, T>(f.q, st, sgd.prepare<T>(1.0, true, step));
  }
  expect_close(to_host(f.q, dp, total), p, tol<T>, "adam multi param");
  expect_close(to_host(f.q, dm, total), m, tol<T>, "adam multi m");
  expect_close(to_host(f.q, dv, total), v, tol<T>, "adam multi v");
  expect_close(to_host(f.q, dps, total), ps, tol<T>, "sgd multi param");
}

// ---------------------------------------------------------------------------
// Memory, graphs, events, errors
// ---------------------------------------------------------------------------

TEST_CASE("a step over buffers allocated once makes no cudaMalloc") {
  cu::queue q;
  auto w = strata::backend::Cuda::allocate<float>(96 * 64);
  auto bias = strata::backend::Cuda::allocate<float>(64);
  auto x = strata::backend::Cuda::allocate<float>(128 * 96);
  auto y = strata::backend::Cuda::allocate<float>(128 * 64);
  auto ids = strata::backend::Cuda::allocate<std::int32_t>(128);
  auto mean = strata::backend::Cuda::allocate<float>(128), rstd = strata::backend::Cuda::allocate<float>(128);
  cu::fill(q, w.size(), 0.01f, w.data());
  cu::fill(q, bias.size(), 0.1f, bias.data());
  const auto step = [&] {
    cu::fill(q, x.size(), 0.5f, x.data());
    cu::gemm_bias_act(q, trans::N, trans::N, 128, 64, 96, 1.f, x.data(), 96, w.data(), 64, 0.f, y.data(), 64,
                      bias.data(), activation::relu, static_cast<float*>(nullptr));
    cu::layernorm_forward(q, 128, 64, y.data(), static_cast<const float*>(nullptr), static_cast<const float*>(nullptr),
                          1e-5, y.data(), mean.data(), rstd.data());
    cu::bias_grad(q, 128, 64, y.data(), bias.data(), true);
    cu::fill(q, ids.size(), std::int32_t(3), ids.data());
    cu::embedding_backward(q, 128, 64, ids.data(), y.data(), 0, 10, w.data(), true);
    (void)cu::sum_squares(q, y.size(), y.data());
  };
  step();  // warm-up: builds cuBLASLt plans
  const std::uint64_t mallocs = cu::malloc_count();
  for (int s = 0; s < 3; ++s) step();
  CHECK(cu::malloc_count() == mallocs);
  CHECK_THROWS_AS(cu::buffer<float>(std::size_t(1) << 42), std::bad_alloc);
}

TEST_CASE("a captured CUDA Graph of a step replays over fixed buffers") {
  cu::queue q;
  const std::size_t R = 64, I = 48, O = 32;
  auto x = cu::buffer<float>(R * I);
  auto w = to_dev(q, random_vec<float>(I * O));
  auto b = to_dev(q, random_vec<float>(O));
  auto out = cu::buffer<float>(R * O);
  cu::buffer<float> h(R * O);
  const auto step = [&] {
    cu::gemm_bias_act(q, trans::N, trans::N, R, O, I, 1.f, x.data(), I, w.data(), O, 0.f, h.data(), O, b.data(),
                      activation::gelu, static_cast<float*>(nullptr));
    cu::layernorm_forward(q, R, O, h.data(), static_cast<const float*>(nullptr), static_cast<const float*>(nullptr),
                          1e-5, out.data(), static_cast<float*>(nullptr), static_cast<float*>(nullptr));
  };
  auto x0 = random_vec<float>(R * I);
  cu::upload(q, x0.data(), x0.size(), x.data());
  step();  // warm-up outside capture
  const auto direct0 = to_host(q, out, R * O);
  cudaGraph_t graph = nullptr;
  STRATA_CUDA_CHECK(cudaStreamBeginCapture(q.stream(), cudaStreamCaptureModeThreadLocal));
  step();
  STRATA_CUDA_CHECK(cudaStreamEndCapture(q.stream(), &graph));
  cudaGraphExec_t exec = nullptr;
  STRATA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  auto x1 = random_vec<float>(R * I);
  cu::upload(q, x1.data(), x1.size(), x.data());
  STRATA_CUDA_CHECK(cudaGraphLaunch(exec, q.stream()));
  const auto replay1 = to_host(q, out, R * O);
  step();  // direct execution on the same input
  const auto direct1 = to_host(q, out, R * O);
  CHECK(replay1 == direct1);
  CHECK(replay1 != direct0);
  STRATA_CUDA_CHECK(cudaGraphExecDestroy(exec));
  STRATA_CUDA_CHECK(cudaGraphDestroy(graph));
}

TEST_CASE("events order work across queues") {
  cu::queue a, b;
  const std::size_t n = 1 << 20;
  cu::buffer<float> x(n);
  cu::fill(a, n, 1.f, x.data());
  cu::scale(a, n, 3.0, x.data());
  auto e = strata::backend::Cuda::record(a);
  strata::backend::Cuda::wait(b, e);
  cu::scale(b, n, 2.0, x.data());
  cu::event done(true);
  cu::record(b, done);
  cu::synchronize(done);
  CHECK(strata::backend::Cuda::query(done));
  CHECK(to_host(b, x, n) == std::vector<float>(n, 6.f));
  CHECK(cu::query(cu::event{}));
}

namespace {
template <int>
__global__ void k_noop() {}
}  // namespace

TEST_CASE("errors name the call, file, line and rank") {
  cu::set_process_rank(3);
  const std::string file = __FILE__;
  int line = 0;
  try {
    line = __LINE__; STRATA_CUDA_CHECK(cudaSetDevice(-1));
    FAIL("no exception");
  } catch (const cu::cuda_error& e) {
    const std::string w = e.what();
    INFO(w);
    CHECK(w.find("cudaSetDevice(-1)") != std::string::npos);
    CHECK(w.find(file + ":" + std::to_string(line)) != std::string::npos);
    CHECK(w.find("rank 3") != std::string::npos);
    CHECK(w.find("cudaErrorInvalidDevice") != std::string::npos);
    CHECK(e.line() == line);
    CHECK(e.rank() == 3);
  }
  cublasLtMatmulDesc_t desc = nullptr;
  STRATA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  try {
    const unsigned char one = 1;  // documented: a size mismatch is CUBLAS_STATUS_INVALID_VALUE
    line = __LINE__; STRATA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &one, 1));
    FAIL("no exception");
  } catch (const cu::cuda_error& e) {
    const std::string w = e.what();
    INFO(w);
    CHECK(w.find("cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA") != std::string::npos);
    CHECK(w.find(file + ":" + std::to_string(line)) != std::string::npos);
    CHECK(w.find("CUBLAS_STATUS_INVALID_VALUE") != std::string::npos);
    CHECK(std::string(e.library()) == "cuBLAS");
  }
  STRATA_CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
  try {
    k_noop<0><<<1, 4096>>>();  // more threads per block than any GPU allows
    line = __LINE__; STRATA_CUDA_CHECK_LAUNCH("k_noop");
    FAIL("no exception");
  } catch (const cu::cuda_error& e) {
    const std::string w = e.what();
    INFO(w);
    CHECK(w.find("k_noop") != std::string::npos);
    CHECK(e.line() == line);
  }
  // The failures were not sticky: the device still works.
  cu::queue q;
  cu::buffer<float> x(4);
  cu::fill(q, 4, 1.f, x.data());
  CHECK(to_host(q, x, 4) == std::vector<float>(4, 1.f));
  cu::set_process_rank(0);
}

static_assert(!strata::backend::Cuda::host_accessible);
static_assert(std::is_same_v<strata::backend::Cuda::buffer<float>, cu::buffer<float>>);
static_assert(!std::is_copy_constructible_v<cu::queue> && std::is_nothrow_move_constructible_v<cu::queue>);
static_assert(!std::is_copy_constructible_v<cu::buffer<float>>);
static_assert(std::is_convertible_v<cu::view<float>, cu::view<const float>>);
static_assert(!std::is_convertible_v<cu::view<const float>, cu::view<float>>);

#include "doctest_main.hpp"
