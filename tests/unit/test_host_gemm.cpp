// Host GEMM (the system's CBLAS) against a plain float64 reference, at several
// thread counts, all transpose combinations and awkward shapes, plus the edge
// semantics strata adds around the BLAS call (beta = 0 never reads C, alpha = 0 or
// K = 0 never reads A/B, invalid arguments throw before C is touched).
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "strata/backend/host/kernels.hpp"

namespace {

using strata::backend::trans;
namespace host = strata::backend::host;

template <class T>
constexpr double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;

// Random values that are exactly representable in float, so one float64
// reference serves both the float and the double kernels.
std::vector<double> rand_f(std::size_t n, std::uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  std::vector<double> v(n);
  for (auto& x : v) x = double(float(d(g)));
  return v;
}

template <class T>
std::vector<T> as(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// ||out - ref|| / ||ref|| over the M x N window of ld-strided storage.
template <class T>
double rel_err(const T* out, const double* ref, std::size_t M, std::size_t N, std::size_t ld) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t j = 0; j < N; ++j) {
      const double d = double(out[i * ld + j]) - ref[i * ld + j];
      num += d * d;
      den += ref[i * ld + j] * ref[i * ld + j];
    }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// The reference: C = alpha * op(A) op(B) + beta * C, plain loops (i-k-j
// order so the large block-boundary case stays quick).
void ref_gemm(trans ta, trans tb, std::size_t M, std::size_t N, std::size_t K, double alpha, const double* A,
              std::size_t lda, const double* B, std::size_t ldb, double beta, double* C, std::size_t ldc) {
  std::vector<double> opB(K * N), row(N);
  for (std::size_t k = 0; k < K; ++k)
    for (std::size_t j = 0; j < N; ++j) opB[k * N + j] = tb == trans::N ? B[k * ldb + j] : B[j * ldb + k];
  for (std::size_t i = 0; i < M; ++i) {
    std::fill(row.begin(), row.end(), 0.0);
    for (std::size_t k = 0; k < K; ++k) {
      const double a = ta == trans::N ? A[i * lda + k] : A[k * lda + i];
      for (std::size_t j = 0; j < N; ++j) row[j] += a * opB[k * N + j];
    }
    for (std::size_t j = 0; j < N; ++j) C[i * ldc + j] = alpha * row[j] + (beta == 0 ? 0.0 : beta * C[i * ldc + j]);
  }
}

struct shape {
  std::size_t M, N, K;
};

// Runs one configuration for T at several thread counts and checks accuracy and
// that C's padding columns are untouched. (Bit-identical results across thread
// counts are not checked: the BLAS does not promise them.)
template <class T>
void check_gemm(shape s, trans ta, trans tb, double alpha, double beta, std::size_t pad, std::uint32_t seed) {
  const std::size_t M = s.M, N = s.N, K = s.K;
  const std::size_t rows_a = ta == trans::N ? M : K, cols_a = ta == trans::N ? K : M;
  const std::size_t rows_b = tb == trans::N ? K : N, cols_b = tb == trans::N ? N : K;
  const std::size_t lda = cols_a + pad, ldb = cols_b + pad, ldc = N + pad;
  const auto A = rand_f(rows_a * lda, seed), B = rand_f(rows_b * ldb, seed + 1), C0 = rand_f(M * ldc, seed + 2);
  std::vector<double> ref = C0;
  ref_gemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, ref.data(), ldc);
  const auto At = as<T>(A), Bt = as<T>(B);

  for (unsigned threads : {1u, 2u, 3u}) {
    CAPTURE(M);
    CAPTURE(N);
    CAPTURE(K);
    CAPTURE(int(ta));
    CAPTURE(int(tb));
    CAPTURE(threads);
    host::queue q(threads);
    std::vector<T> C = as<T>(C0);
    const T sentinel = T(12345.5);
    for (std::size_t i = 0; i < M; ++i) {
      for (std::size_t j = N; j < ldc; ++j) C[i * ldc + j] = sentinel;
      // beta == 0 must not read C: poison it.
      if (beta == 0)
        for (std::size_t j = 0; j < N; ++j) C[i * ldc + j] = std::numeric_limits<T>::quiet_NaN();
    }
    host::gemm<T>(q, ta, tb, M, N, K, T(alpha), At.data(), lda, Bt.data(), ldb, T(beta), C.data(), ldc);
    CHECK(rel_err(C.data(), ref.data(), M, N, ldc) <= tol<T>);
    bool pad_ok = true;
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = N; j < ldc; ++j) pad_ok &= (C[i * ldc + j] == sentinel);
    CHECK(pad_ok);
  }
}

const shape kShapes[] = {{1, 1, 1}, {7, 13, 5}, {65, 130, 33}, {128, 64, 256}, {3, 200, 17}, {150, 9, 300}};

}  // namespace

TEST_CASE_TEMPLATE("host gemm: all transposes, odd shapes, beta = 0 with NaN-poisoned C", T, float, double) {
  std::uint32_t seed = 100;
  for (const shape& s : kShapes)
    for (trans ta : {trans::N, trans::T})
      for (trans tb : {trans::N, trans::T}) check_gemm<T>(s, ta, tb, 1.0, 0.0, 0, seed++);
}

TEST_CASE_TEMPLATE("host gemm: beta = 1 accumulates, general alpha/beta, padded leading dims", T, float, double) {
  std::uint32_t seed = 200;
  for (const shape& s : kShapes)
    for (trans ta : {trans::N, trans::T})
      for (trans tb : {trans::N, trans::T}) {
        check_gemm<T>(s, ta, tb, 1.0, 1.0, 0, seed++);
        check_gemm<T>(s, ta, tb, -0.75, 0.5, 3, seed++);
      }
}

TEST_CASE_TEMPLATE("host gemm: large and thin shapes (the BLAS's blocking and threading paths)", T, float, double) {
  // Wide N with K past a typical K block, then tall M with a long K: shapes where
  // the BLAS splits the work over threads and cache blocks.
  check_gemm<T>({7, 3075, 260}, trans::N, trans::N, 1.0, 0.0, 0, 300);
  check_gemm<T>({7, 3075, 260}, trans::T, trans::T, 0.5, 1.0, 1, 301);
  check_gemm<T>({290, 40, 520}, trans::N, trans::T, 1.0, 0.0, 0, 302);
  check_gemm<T>({290, 40, 520}, trans::T, trans::N, -1.0, 1.0, 2, 303);
}

TEST_CASE_TEMPLATE("host gemm: alpha = 0 or K = 0 only scales C and never reads A or B", T, float, double) {
  host::queue q(2);
  const std::size_t M = 37, N = 70;
  const auto C0 = rand_f(M * N, 7);
  for (double beta : {0.0, 1.0, -2.0}) {
    std::vector<T> C = as<T>(C0);
    if (beta == 0) std::fill(C.begin(), C.end(), std::numeric_limits<T>::quiet_NaN());
    host::gemm<T>(q, trans::N, trans::N, M, N, 5, T(0), nullptr, 5, nullptr, N, T(beta), C.data(), N);
    for (std::size_t i = 0; i < C.size(); ++i) REQUIRE(C[i] == T(beta * C0[i]));
    C = as<T>(C0);
    host::gemm<T>(q, trans::T, trans::T, M, N, 0, T(1), nullptr, M, nullptr, 0, T(beta), C.data(), N);
    for (std::size_t i = 0; i < C.size(); ++i) REQUIRE(C[i] == T(beta * C0[i]));
  }
  // M or N == 0: nothing to do, nothing touched.
  host::gemm<T>(q, trans::N, trans::N, 0, 5, 5, T(1), nullptr, 5, nullptr, 5, T(0), nullptr, 5);
}

TEST_CASE("host gemm: invalid arguments throw before touching C") {
  host::queue q(1);
  std::vector<float> A(100, 1.0f), B(100, 1.0f), C(100, 7.0f);
  CHECK_THROWS_AS(host::gemm<float>(q, trans::N, trans::N, 4, 4, 5, 1.f, A.data(), 4, B.data(), 4, 0.f, C.data(), 4),
                  std::invalid_argument);  // lda < K
  CHECK_THROWS_AS(host::gemm<float>(q, trans::T, trans::N, 5, 4, 4, 1.f, A.data(), 4, B.data(), 4, 0.f, C.data(), 4),
                  std::invalid_argument);  // lda < M for op(A) = A^T
  CHECK_THROWS_AS(host::gemm<float>(q, trans::N, trans::T, 4, 4, 5, 1.f, A.data(), 5, B.data(), 4, 0.f, C.data(), 4),
                  std::invalid_argument);  // ldb < K for op(B) = B^T
  CHECK_THROWS_AS(host::gemm<float>(q, trans::N, trans::N, 4, 5, 4, 1.f, A.data(), 4, B.data(), 5, 0.f, C.data(), 4),
                  std::invalid_argument);  // ldc < N
  CHECK_THROWS_AS(host::gemm<float>(q, trans::N, trans::N, 4, 4, 4, 1.f, nullptr, 4, B.data(), 4, 0.f, C.data(), 4),
                  std::invalid_argument);
  for (float c : C) CHECK(c == 7.0f);
}

TEST_CASE_TEMPLATE("host gemm: strided batched equals a loop of gemms", T, float, double) {
  host::queue q(2);
  const std::size_t M = 9, N = 11, K = 13, batch = 4;
  const std::size_t sa = M * K + 5, sb = K * N + 3, sc = M * N + 7;
  const auto A = rand_f(batch * sa, 1), B = rand_f(batch * sb, 2), C0 = rand_f(batch * sc, 3);
  std::vector<double> ref = C0;
  for (std::size_t b = 0; b < batch; ++b)
    ref_gemm(trans::N, trans::T, M, N, K, 1.0, A.data() + b * sa, K, B.data() + b * sb, K, 0.5, ref.data() + b * sc, N);
  const auto At = as<T>(A), Bt = as<T>(B);
  auto C = as<T>(C0);
  host::gemm_strided_batched<T>(q, trans::N, trans::T, M, N, K, T(1), At.data(), K, sa, Bt.data(), K, sb, T(0.5),
                                C.data(), N, sc, batch);
  for (std::size_t b = 0; b < batch; ++b) CHECK(rel_err(C.data() + b * sc, ref.data() + b * sc, M, N, N) <= tol<T>);
}

TEST_CASE("host gemm: as a linear layer, dX = dY W^T and dW = X^T dY match finite differences") {
  // L(X, W) = sum(G .* (X W)); its gradients are the two GEMMs below.
  host::queue q(2);
  const std::size_t B = 6, I = 7, O = 5;
  std::vector<double> X = rand_f(B * I, 11), W = rand_f(I * O, 12), G = rand_f(B * O, 13);
  auto loss = [&]() {
    std::vector<double> Y(B * O);
    host::gemm<double>(q, trans::N, trans::N, B, O, I, 1.0, X.data(), I, W.data(), O, 0.0, Y.data(), O);
    double l = 0;
    for (std::size_t i = 0; i < Y.size(); ++i) l += G[i] * Y[i];
    return l;
  };
  std::vector<double> dX(B * I, std::nan("")), dW(I * O, std::nan(""));
  host::gemm<double>(q, trans::N, trans::T, B, I, O, 1.0, G.data(), O, W.data(), O, 0.0, dX.data(), I);
  host::gemm<double>(q, trans::T, trans::N, I, O, B, 1.0, X.data(), I, G.data(), O, 0.0, dW.data(), O);

  const double h = 1e-6;
  auto fd = [&](std::vector<double>& p) {
    std::vector<double> g(p.size());
    for (std::size_t i = 0; i < p.size(); ++i) {
      const double keep = p[i];
      p[i] = keep + h;
      const double lp = loss();
      p[i] = keep - h;
      const double lm = loss();
      p[i] = keep;
      g[i] = (lp - lm) / (2 * h);
    }
    return g;
  };
  const auto gX = fd(X), gW = fd(W);
  CHECK(rel_err(dX.data(), gX.data(), B, I, I) <= 1e-6);
  CHECK(rel_err(dW.data(), gW.data(), I, O, O) <= 1e-6);

  // beta = 1 accumulates a second micro-batch's gradient on top.
  std::vector<double> dW2 = dW;
  host::gemm<double>(q, trans::T, trans::N, I, O, B, 1.0, X.data(), I, G.data(), O, 1.0, dW2.data(), O);
  for (std::size_t i = 0; i < dW.size(); ++i) CHECK(dW2[i] == doctest::Approx(2 * dW[i]).epsilon(1e-14));
}
