// requires: cuda
// The CUDA backend against the host backend: every device kernel on fresh
// random inputs (several shapes, odd ones included), outputs poisoned with
// NaN before each run so an element the kernel failed to write shows up.
//
// Tolerances (norm-wise relative error ||dev - host|| / ||host||):
//   float  1e-5   (different summation orders, expf/tanhf vs libm, FMA)
//   double 1e-12
//   TF32   5e-3   (10-bit mantissa products)
//   bf16   2e-2   (8-bit mantissa storage; compared with the host's float
//                  result on the same bf16-rounded inputs)
// Mixed precision (bf16 activations, float statistics and gradients) runs
// the HOST kernel of the same name on the same bf16 inputs, element by
// element:
//   bf16 outputs   within 1 bf16 ulp (both sides compute in float and round
//                  once; the device's expf/tanhf, or a float intermediate
//                  against the host's double, may land across a rounding
//                  boundary), plus a small absolute floor where a float
//                  intermediate cancels (dx, the label column of dlogits)
//   float outputs  1e-5 relative plus an absolute floor scaled to the sum
//                  (row statistics, bias / LayerNorm / embedding gradients)
//   conversions    bit-exact (cast_elements; NaN only as NaN)
//   cuBLASLt's fused GELU epilogue: 1e-3 (its formula is not documented
//   beyond "GELU"; the default, unfused path is held to 1e-5)
//   gemm_wgrad_bias's bias gradient (float): 1e-4 (summed in FP32 by the
//   GEMM epilogue, where bias_grad sums in double)
// Exit code 77 (ctest: skipped) when there is no CUDA device.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
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

namespace {

namespace cu = strata::backend::cuda;
namespace hb = strata::backend::host;
using strata::backend::activation;
using strata::backend::trans;
using cu::bf16;
static_assert(std::is_same_v<cu::bf16, strata::bf16>, "one bf16 for host, device and cuBLASLt");

template <class T>
constexpr double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
constexpr double tol_tf32 = 5e-3;
constexpr double tol_bf16 = 2e-2;
constexpr double tol_lt_gelu = 1e-3;

std::mt19937_64& rng() {
  static std::mt19937_64 g(20240611);
  return g;
}

template <class T>
std::vector<T> random_vec(std::size_t n, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = T(d(rng()));
  return v;
}
std::vector<std::int32_t> random_ids(std::size_t n, std::int32_t lo, std::int32_t hi) {
  std::uniform_int_distribution<std::int32_t> d(lo, hi - 1);
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = d(rng());
  return v;
}

double as_double(float v) { return v; }
double as_double(double v) { return v; }
double as_double(bf16 v) { return double(float(v)); }

template <class T>
cu::buffer<T> to_dev(cu::queue& q, const std::vector<T>& h) {
  cu::buffer<T> b(std::max<std::size_t>(h.size(), 1));
  cu::upload(q, h.data(), h.size(), b.data());
  return b;
}
template <class T>
cu::buffer<T> poisoned(cu::queue& q, std::size_t n) {
  cu::buffer<T> b(std::max<std::size_t>(n, 1));
  // All-ones bytes are a NaN in float, double and bf16.
  STRATA_CUDA_CHECK(cudaMemsetAsync(b.data(), 0xff, b.bytes(), q.stream()));
  return b;
}
template <class T>
std::vector<T> to_host(cu::queue& q, const T* d, std::size_t n) {
  std::vector<T> h(n);
  cu::download(q, d, n, h.data());
  q.synchronize();
  return h;
}
template <class T>
std::vector<T> to_host(cu::queue& q, const cu::buffer<T>& b, std::size_t n) {
  return to_host(q, b.data(), n);
}

// Norm-wise relative error, plus: every element the host made finite must be
// finite on the device too (catches unwritten, NaN-poisoned outputs), and
// NaN/Inf must sit at the same places.
template <class T, class U>
void expect_close(const std::vector<T>& dev, const std::vector<U>& ref, double tolerance, const std::string& what) {
  INFO(what);
  REQUIRE(dev.size() == ref.size());
  double num = 0, den = 0;
  std::size_t mismatch = 0, first = dev.size();
  for (std::size_t i = 0; i < dev.size(); ++i) {
    const double d = as_double(dev[i]), r = as_double(ref[i]);
    if (!std::isfinite(r) || !std::isfinite(d)) {
      const bool same = (std::isnan(r) && std::isnan(d)) || r == d;
      if (!same && ++mismatch == 1) first = i;
      continue;
    }
    num += (d - r) * (d - r);
    den += r * r;
  }
  INFO("first non-finite mismatch at " << first);
  CHECK(mismatch == 0);
  const double err = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  INFO("relative error " << err << " (tolerance " << tolerance << ")");
  CHECK(err <= tolerance);
}

template <class T>
std::vector<T> round_bf16(const std::vector<T>& v) {
  std::vector<T> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = T(float(bf16(float(v[i]))));
  return r;
}
std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = bf16(v[i]);
  return r;
}
std::vector<bf16> random_bf16(std::size_t n, double lo = -1.0, double hi = 1.0) {
  return to_bf16(random_vec<float>(n, lo, hi));
}

// Position of a bf16 on the number line, in ulps (+0 and -0 both 0): two
// finite values are k ulps apart iff their orders differ by k.
int bf16_order(bf16 v) {
  const int m = v.bits & 0x7fff;
  return (v.bits & 0x8000) ? -m : m;
}

// Element by element: NaN/Inf at the same places, finite values accepted by close(i, d, r).
template <class T, class Close>
void expect_each(const std::vector<T>& dev, const std::vector<T>& ref, Close close, const std::string& what) {
  INFO(what);
  REQUIRE(dev.size() == ref.size());
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < dev.size(); ++i) {
    const double d = as_double(dev[i]), r = as_double(ref[i]);
    const bool ok = (!std::isfinite(r) || !std::isfinite(d)) ? (std::isnan(r) && std::isnan(d)) || r == d
                                                              : close(i, d, r);
    if (!ok && bad++ == 0) first = i;
  }
  INFO(bad << " elements differ; first at " << first << ": device " << (bad ? as_double(dev[first]) : 0.0)
            << ", host " << (bad ? as_double(ref[first]) : 0.0));
  CHECK(bad == 0);
}

// bf16 outputs: within one bf16 ulp or abs_floor of the host's.
void expect_bf16_close(const std::vector<bf16>& dev, const std::vector<bf16>& ref, double abs_floor,
                       const std::string& what) {
  expect_each(
      dev, ref,
      [&](std::size_t i, double d, double r) {
        return std::abs(bf16_order(dev[i]) - bf16_order(ref[i])) <= 1 || std::abs(d - r) <= abs_floor;
      },
      what);
}

// Real outputs: |dev - ref| <= rel * |ref| + abs_floor.
template <class T>
void expect_near(const std::vector<T>& dev, const std::vector<T>& ref, double rel, double abs_floor,
                 const std::string& what) {
  expect_each(
      dev, ref, [&](std::size_t, double d, double r) { return std::abs(d - r) <= rel * std::abs(r) + abs_floor; },
      what);
}
constexpr double tol_mixed = 1e-5;  // float statistics and gradients of bf16 kernels

// Bit patterns, for the exact comparisons of conversions.
std::uint16_t bits_of(bf16 v) { return v.bits; }
std::uint32_t bits_of(float v) { return std::bit_cast<std::uint32_t>(v); }
std::uint64_t bits_of(double v) { return std::bit_cast<std::uint64_t>(v); }
bool is_nan(bf16 v) { return std::isnan(float(v)); }
bool is_nan(float v) { return std::isnan(v); }
bool is_nan(double v) { return std::isnan(v); }
// Same bits, except that any NaN matches any NaN (payloads may differ).
template <class T>
void expect_same_bits(const std::vector<T>& dev, const std::vector<T>& ref, const std::string& what) {
  INFO(what);
  REQUIRE(dev.size() == ref.size());
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < dev.size(); ++i) {
    const bool ok = (is_nan(dev[i]) && is_nan(ref[i])) || bits_of(dev[i]) == bits_of(ref[i]);
    if (!ok && bad++ == 0) first = i;
  }
  INFO(bad << " elements differ; first at " << first << ": device bits " << (bad ? bits_of(dev[first]) : 0)
            << ", host bits " << (bad ? bits_of(ref[first]) : 0));
  CHECK(bad == 0);
}

struct fixture {
  cu::queue q;
  hb::queue hq{2};
};

const char* name(trans t) { return t == trans::N ? "N" : "T"; }
const char* name(activation a) { return a == activation::none ? "none" : a == activation::relu ? "relu" : "gelu"; }

struct gemm_shape {
  std::size_t M, N, K;
};
const gemm_shape gemm_shapes[] = {{1, 1, 1}, {3, 5, 7}, {17, 33, 9}, {64, 128, 96}, {129, 65, 257}, {250, 3, 1000}};

}  // namespace

// ---------------------------------------------------------------------------
// GEMM
// ---------------------------------------------------------------------------

TEST_CASE_TEMPLATE("gemm matches the host (all transposes, padded lds, beta)", T, float, double) {
  fixture f;
  for (const auto& s : gemm_shapes)
    for (trans ta : {trans::N, trans::T})
      for (trans tb : {trans::N, trans::T})
        for (int variant = 0; variant < 2; ++variant) {
          const std::size_t lda = (ta == trans::N ? s.K : s.M) + 3 * variant;
          const std::size_t ldb = (tb == trans::N ? s.N : s.K) + variant;
          const std::size_t ldc = s.N + 2 * variant;
          const std::size_t a_rows = ta == trans::N ? s.M : s.K, b_rows = tb == trans::N ? s.K : s.N;
          const T alpha = variant ? T(0.5) : T(1), beta = variant ? T(-1.5) : T(0);
          auto A = random_vec<T>(a_rows * lda), B = random_vec<T>(b_rows * ldb), C = random_vec<T>(s.M * ldc);
          auto dA = to_dev(f.q, A), dB = to_dev(f.q, B);
          // beta == 0: C starts as NaN and must not leak; else C is an input.
          auto dC = beta == T(0) ? poisoned<T>(f.q, s.M * ldc) : to_dev(f.q, C);
          std::vector<T> ref = C;
          if (beta == T(0))
            for (std::size_t r = 0; r < s.M; ++r)
              for (std::size_t c = s.N; c < ldc; ++c) ref[r * ldc + c] = std::numeric_limits<T>::quiet_NaN();
          hb::gemm(f.hq, ta, tb, s.M, s.N, s.K, alpha, A.data(), lda, B.data(), ldb, beta, ref.data(), ldc);
          cu::gemm(f.q, ta, tb, s.M, s.N, s.K, alpha, dA.data(), lda, dB.data(), ldb, beta, dC.data(), ldc);
          expect_close(to_host(f.q, dC, s.M * ldc), ref, tol<T>,
                       std::string("gemm ") + name(ta) + name(tb) + " M=" + std::to_string(s.M) +
                           " N=" + std::to_string(s.N) + " K=" + std::to_string(s.K) + " variant " +
                           std::to_string(variant));
        }
}

TEST_CASE_TEMPLATE("gemm degenerate cases: K == 0 and alpha == 0 only scale C", T, float, double) {
  fixture f;
  const std::size_t M = 7, N = 9, K = 5;
  auto C = random_vec<T>(M * N);
  for (T beta : {T(0), T(2)}) {
    auto dC = beta == T(0) ? poisoned<T>(f.q, M * N) : to_dev(f.q, C);
    std::vector<T> ref = C;
    hb::gemm(f.hq, trans::N, trans::N, M, N, 0, T(1), static_cast<const T*>(nullptr), K,
             static_cast<const T*>(nullptr), N, beta, ref.data(), N);
    cu::gemm(f.q, trans::N, trans::N, M, N, 0, T(1), static_cast<const T*>(nullptr), K,
             static_cast<const T*>(nullptr), N, beta, dC.data(), N);
    expect_close(to_host(f.q, dC, M * N), ref, 0.0, "K == 0");
  }
  CHECK_THROWS_AS(cu::gemm(f.q, trans::N, trans::N, M, N, K, T(1), static_cast<const T*>(nullptr), K,
                           static_cast<const T*>(nullptr), N, T(0), static_cast<T*>(nullptr), N),
                  std::invalid_argument);
}

TEST_CASE_TEMPLATE("gemm_strided_batched matches the host", T, float, double) {
  fixture f;
  const std::size_t M = 13, N = 24, K = 31, batch = 4;
  for (trans ta : {trans::N, trans::T})
    for (trans tb : {trans::N, trans::T}) {
      const std::size_t lda = ta == trans::N ? K : M, ldb = tb == trans::N ? N : K, ldc = N;
      const std::size_t sa = M * K + 5, sb = K * N + 3, sc = M * N + 7;
      auto A = random_vec<T>(sa * batch), B = random_vec<T>(sb * batch);
      auto dA = to_dev(f.q, A), dB = to_dev(f.q, B);
      auto dC = poisoned<T>(f.q, sc * batch);
      std::vector<T> ref(sc * batch, std::numeric_limits<T>::quiet_NaN());
      hb::gemm_strided_batched(f.hq, ta, tb, M, N, K, T(1), A.data(), lda, sa, B.data(), ldb, sb, T(0), ref.data(), ldc,
                               sc, batch);
      cu::gemm_strided_batched(f.q, ta, tb, M, N, K, T(1), dA.data(), lda, sa, dB.data(), ldb, sb, T(0), dC.data(),
                               ldc, sc, batch);
      expect_close(to_host(f.q, dC, sc * batch), ref, tol<T>, std::string("batched ") + name(ta) + name(tb));
    }
}

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

TEST_CASE("bf16 gemm (FP32 accumulate) to bf16 and to float") {
  fixture f;
  for (const auto& s : gemm_shapes)
    for (trans ta : {trans::N, trans::T})
      for (trans tb : {trans::N, trans::T}) {
        const std::size_t lda = ta == trans::N ? s.K : s.M, ldb = tb == trans::N ? s.N : s.K;
        auto A = round_bf16(random_vec<float>(s.M * s.K)), B = round_bf16(random_vec<float>(s.K * s.N));
        auto dA = to_dev(f.q, to_bf16(A)), dB = to_dev(f.q, to_bf16(B));
        std::vector<float> ref(s.M * s.N);
        hb::gemm(f.hq, ta, tb, s.M, s.N, s.K, 1.f, A.data(), lda, B.data(), ldb, 0.f, ref.data(), s.N);
        auto dC = poisoned<bf16>(f.q, s.M * s.N);
        cu::gemm(f.q, ta, tb, s.M, s.N, s.K, 1.f, dA.data(), lda, dB.data(), ldb, 0.f, dC.data(), s.N);
        expect_close(to_host(f.q, dC, s.M * s.N), ref, tol_bf16, "bf16->bf16 K=" + std::to_string(s.K));
        auto dF = poisoned<float>(f.q, s.M * s.N);
        cu::gemm(f.q, ta, tb, s.M, s.N, s.K, 1.f, dA.data(), lda, dB.data(), ldb, 0.f, dF.data(), s.N);
        expect_close(to_host(f.q, dF, s.M * s.N), ref, tol_bf16, "bf16->float K=" + std::to_string(s.K));
      }
  // Batched bf16.
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

TEST_CASE_TEMPLATE("gemm_bias_act equals gemm + bias_activation_forward", T, float, double) {
  fixture f;
  for (bool lt_gelu : {false, true}) {
    f.q.set_lt_gelu_epilogue(lt_gelu);
    for (const auto& s : gemm_shapes)
      for (activation act : {activation::none, activation::relu, activation::gelu})
        for (int with_bias = 0; with_bias < 2; ++with_bias)
          for (int with_pre = 0; with_pre < 2; ++with_pre) {
            const std::size_t ldc = s.N % 8 == 0 ? s.N : s.N + 1;  // exercise ld != N too
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
            const double t = (lt_gelu && act == activation::gelu && std::is_same_v<T, float>) ? tol_lt_gelu : tol<T>;
            const std::string what = std::string("gemm_bias_act ") + name(act) + " bias=" + std::to_string(with_bias) +
                                     " pre=" + std::to_string(with_pre) + " lt_gelu=" + std::to_string(lt_gelu) +
                                     " K=" + std::to_string(s.K);
            expect_close(unpad(to_host(f.q, dC, s.M * ldc)), ref, std::max(t, tol<T>), what);
            if (with_pre) expect_close(unpad(to_host(f.q, dP, s.M * ldc)), pre, tol<T>, what + " (pre)");
          }
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
// Elementwise
// ---------------------------------------------------------------------------

struct rc {
  std::size_t rows, cols;
};
const rc shapes[] = {{1, 1}, {3, 7}, {17, 33}, {64, 128}, {129, 1000}, {5, 4099}, {3, 9000}, {300, 256}};

TEST_CASE_TEMPLATE("bias_activation_forward and activation_backward", T, float, double) {
  fixture f;
  for (const auto& s : shapes)
    for (activation act : {activation::none, activation::relu, activation::gelu}) {
      const std::size_t n = s.rows * s.cols;
      auto x = random_vec<T>(n, -3, 3), bias = random_vec<T>(s.cols), dy = random_vec<T>(n);
      auto dx = to_dev(f.q, x), dbias = to_dev(f.q, bias), ddy = to_dev(f.q, dy);
      std::vector<T> y(n), pre(n), g(n);
      hb::bias_activation_forward(f.hq, act, s.rows, s.cols, x.data(), bias.data(), pre.data(), y.data());
      hb::activation_backward(f.hq, act, n, pre.data(), dy.data(), g.data());
      auto dyo = poisoned<T>(f.q, n), dpre = poisoned<T>(f.q, n), dg = poisoned<T>(f.q, n);
      cu::bias_activation_forward(f.q, act, s.rows, s.cols, dx.data(), dbias.data(), dpre.data(), dyo.data());
      cu::activation_backward(f.q, act, n, static_cast<const T*>(dpre.data()), ddy.data(), dg.data());
      const std::string what = std::string(name(act)) + " " + std::to_string(s.rows) + "x" + std::to_string(s.cols);
      expect_close(to_host(f.q, dyo, n), y, tol<T>, "forward " + what);
      expect_close(to_host(f.q, dpre, n), pre, tol<T>, "pre " + what);
      expect_close(to_host(f.q, dg, n), g, tol<T>, "backward " + what);
      // In place, no bias, misaligned (scalar path).
      if (n > 1) {
        std::vector<T> y2(n - 1);
        hb::bias_activation_forward(f.hq, act, 1, n - 1, x.data() + 1, static_cast<const T*>(nullptr),
                                    static_cast<T*>(nullptr), y2.data());
        auto d2 = to_dev(f.q, x);
        cu::bias_activation_forward(f.q, act, 1, n - 1, d2.data() + 1, static_cast<const T*>(nullptr),
                                    static_cast<T*>(nullptr), d2.data() + 1);
        expect_close(to_host(f.q, d2.data() + 1, n - 1), y2, tol<T>, "in place, offset " + what);
      }
    }
}

TEST_CASE("bf16 elementwise kernels compute in float") {
  fixture f;
  for (const auto& s : shapes)
    for (activation act : {activation::none, activation::relu, activation::gelu}) {
      const std::size_t n = s.rows * s.cols;
      auto x = round_bf16(random_vec<float>(n, -3, 3)), bias = round_bf16(random_vec<float>(s.cols));
      auto dy = round_bf16(random_vec<float>(n));
      std::vector<float> y(n), pre(n), g(n);
      hb::bias_activation_forward(f.hq, act, s.rows, s.cols, x.data(), bias.data(), pre.data(), y.data());
      hb::activation_backward(f.hq, act, n, pre.data(), dy.data(), g.data());
      auto dx = to_dev(f.q, to_bf16(x)), dbias = to_dev(f.q, to_bf16(bias)), ddy = to_dev(f.q, to_bf16(dy));
      auto dyo = poisoned<bf16>(f.q, n), dpre = poisoned<bf16>(f.q, n), dg = poisoned<bf16>(f.q, n);
      cu::bias_activation_forward(f.q, act, s.rows, s.cols, dx.data(), dbias.data(), dpre.data(), dyo.data());
      cu::activation_backward(f.q, act, n, static_cast<const bf16*>(dpre.data()), ddy.data(), dg.data());
      expect_close(to_host(f.q, dyo, n), y, tol_bf16, std::string("bf16 forward ") + name(act));
      expect_close(to_host(f.q, dg, n), g, tol_bf16, std::string("bf16 backward ") + name(act));
      std::vector<float> sx = x, ax = x;
      hb::scale(f.hq, n, 0.75, sx.data());
      hb::axpy(f.hq, n, -2.0, dy.data(), ax.data());
      auto ds = to_dev(f.q, to_bf16(x)), da = to_dev(f.q, to_bf16(x));
      cu::scale(f.q, n, 0.75, ds.data());
      cu::axpy(f.q, n, -2.0, static_cast<const bf16*>(ddy.data()), da.data());
      expect_close(to_host(f.q, ds, n), sx, tol_bf16, "bf16 scale");
      expect_close(to_host(f.q, da, n), ax, tol_bf16, "bf16 axpy");
    }
}

TEST_CASE_TEMPLATE("bias_grad (accumulate and overwrite) is deterministic", T, float, double) {
  fixture f;
  const rc extra[] = {{0, 5}, {4000, 3}, {20000, 70}};
  std::vector<rc> all(std::begin(shapes), std::end(shapes));
  all.insert(all.end(), std::begin(extra), std::end(extra));
  for (const auto& s : all)
    for (bool accumulate : {false, true}) {
      auto dy = random_vec<T>(s.rows * s.cols), init = random_vec<T>(s.cols);
      std::vector<T> ref = init;
      hb::bias_grad(f.hq, s.rows, s.cols, dy.data(), ref.data(), accumulate);
      auto ddy = to_dev(f.q, dy);
      auto db = accumulate ? to_dev(f.q, init) : poisoned<T>(f.q, s.cols);
      cu::bias_grad(f.q, s.rows, s.cols, ddy.data(), db.data(), accumulate);
      const auto first = to_host(f.q, db, s.cols);
      expect_close(first, ref, tol<T>,
                   "bias_grad " + std::to_string(s.rows) + "x" + std::to_string(s.cols) + " acc=" +
                       std::to_string(accumulate));
      if (!accumulate) {
        cu::bias_grad(f.q, s.rows, s.cols, ddy.data(), db.data(), false);
        CHECK(to_host(f.q, db, s.cols) == first);  // bitwise: same launch, same order
      }
    }
}

TEST_CASE("bias_grad: bf16 dy into a float gradient (accumulate and overwrite)") {
  fixture f;
  const rc extra[] = {{0, 5}, {4000, 3}, {20000, 70}};
  std::vector<rc> all(std::begin(shapes), std::end(shapes));
  all.insert(all.end(), std::begin(extra), std::end(extra));
  for (const auto& s : all)
    for (bool accumulate : {false, true}) {
      auto dy = random_bf16(s.rows * s.cols);
      auto init = random_vec<float>(s.cols);
      std::vector<float> ref = init;
      hb::bias_grad(f.hq, s.rows, s.cols, dy.data(), ref.data(), accumulate);
      auto ddy = to_dev(f.q, dy);
      auto db = accumulate ? to_dev(f.q, init) : poisoned<float>(f.q, s.cols);
      cu::bias_grad(f.q, s.rows, s.cols, static_cast<const bf16*>(ddy.data()), db.data(), accumulate);
      // Both sum the exact float values of dy in double and round once:
      // they differ only where the double sums do (order), far below 1e-5.
      expect_near(to_host(f.q, db, s.cols), ref, tol_mixed, 1e-7 * double(s.rows + 1),
                  "bias_grad bf16->float " + std::to_string(s.rows) + "x" + std::to_string(s.cols) +
                      " acc=" + std::to_string(accumulate));
    }
}

// ---------------------------------------------------------------------------
// Cross-entropy
// ---------------------------------------------------------------------------

TEST_CASE_TEMPLATE("softmax cross-entropy forward and backward", T, float, double) {
  fixture f;
  for (const auto& s : shapes) {
    const std::size_t n = s.rows * s.cols;
    auto logits = random_vec<T>(n, -8, 8);
    auto labels = random_ids(s.rows, 0, std::int32_t(s.cols));
    std::vector<T> loss(s.rows), probs(n), dl(n);
    hb::softmax_cross_entropy_forward(f.hq, s.rows, s.cols, logits.data(), labels.data(), loss.data(), probs.data());
    hb::softmax_cross_entropy_backward(f.hq, s.rows, s.cols, probs.data(), labels.data(), 0.25, dl.data());
    auto dlog = to_dev(f.q, logits), dprobs_in = to_dev(f.q, probs);
    auto dlab = to_dev(f.q, labels);
    auto dloss = poisoned<T>(f.q, s.rows), dprobs = poisoned<T>(f.q, n), ddl = poisoned<T>(f.q, n);
    cu::softmax_cross_entropy_forward(f.q, s.rows, s.cols, dlog.data(), dlab.data(), dloss.data(), dprobs.data());
    cu::softmax_cross_entropy_backward(f.q, s.rows, s.cols, static_cast<const T*>(dprobs_in.data()), dlab.data(), 0.25,
                                       ddl.data());
    const std::string what = std::to_string(s.rows) + "x" + std::to_string(s.cols);
    expect_close(to_host(f.q, dloss, s.rows), loss, tol<T>, "loss " + what);
    expect_close(to_host(f.q, dprobs, n), probs, tol<T>, "probs " + what);
    expect_close(to_host(f.q, ddl, n), dl, tol<T>, "dlogits " + what);
    // In place (dlogits aliases probs), and without probs_out.
    cu::softmax_cross_entropy_backward(f.q, s.rows, s.cols, static_cast<const T*>(dprobs_in.data()), dlab.data(),
                                       0.25, dprobs_in.data());
    expect_close(to_host(f.q, dprobs_in, n), dl, tol<T>, "dlogits in place " + what);
    auto dloss2 = poisoned<T>(f.q, s.rows);
    cu::softmax_cross_entropy_forward(f.q, s.rows, s.cols, dlog.data(), dlab.data(), dloss2.data(),
                                      static_cast<T*>(nullptr));
    expect_close(to_host(f.q, dloss2, s.rows), loss, tol<T>, "loss without probs " + what);
  }
}

TEST_CASE("softmax cross-entropy: bf16 logits and probs, float loss") {
  fixture f;
  for (const auto& s : shapes) {
    const std::size_t n = s.rows * s.cols;
    auto logits = random_bf16(n, -8, 8);
    auto labels = random_ids(s.rows, 0, std::int32_t(s.cols));
    std::vector<float> loss(s.rows);
    std::vector<bf16> probs(n), dl(n);
    hb::softmax_cross_entropy_forward(f.hq, s.rows, s.cols, logits.data(), labels.data(), loss.data(), probs.data());
    hb::softmax_cross_entropy_backward(f.hq, s.rows, s.cols, probs.data(), labels.data(), 0.25, dl.data());
    auto dlog = to_dev(f.q, logits), dprobs_in = to_dev(f.q, probs);
    auto dlab = to_dev(f.q, labels);
    auto dloss = poisoned<float>(f.q, s.rows);
    auto dprobs = poisoned<bf16>(f.q, n), ddl = poisoned<bf16>(f.q, n);
    cu::softmax_cross_entropy_forward(f.q, s.rows, s.cols, static_cast<const bf16*>(dlog.data()), dlab.data(),
                                      dloss.data(), dprobs.data());
    // Backward from the host's probabilities: the same bf16 inputs on both sides.
    cu::softmax_cross_entropy_backward(f.q, s.rows, s.cols, static_cast<const bf16*>(dprobs_in.data()), dlab.data(),
                                       0.25, ddl.data());
    const std::string what = std::to_string(s.rows) + "x" + std::to_string(s.cols);
    // loss = log(sum exp) - (x_l - max) >= 0, sums in double on both sides.
    expect_near(to_host(f.q, dloss, s.rows), loss, tol_mixed, 1e-6, "bf16 loss " + what);
    expect_bf16_close(to_host(f.q, dprobs, n), probs, 0.0, "bf16 probs " + what);
    expect_bf16_close(to_host(f.q, ddl, n), dl, 0.0, "bf16 dlogits " + what);
    // In place (dlogits aliases probs), and without probs_out.
    cu::softmax_cross_entropy_backward(f.q, s.rows, s.cols, static_cast<const bf16*>(dprobs_in.data()), dlab.data(),
                                       0.25, dprobs_in.data());
    expect_bf16_close(to_host(f.q, dprobs_in, n), dl, 0.0, "bf16 dlogits in place " + what);
    auto dloss2 = poisoned<float>(f.q, s.rows);
    cu::softmax_cross_entropy_forward(f.q, s.rows, s.cols, static_cast<const bf16*>(dlog.data()), dlab.data(),
                                      dloss2.data(), static_cast<bf16*>(nullptr));
    expect_near(to_host(f.q, dloss2, s.rows), loss, tol_mixed, 1e-6, "bf16 loss without probs " + what);
  }
}

// Logits T, row statistics S: (float, float), (double, double), and bf16 logits with
// float statistics. Real outputs: norm-wise tol<T> (tol_mixed element-wise for bf16);
// bf16 dlogits within one ulp (the label column s * (p - 1) may cancel p's ~1e-7).
template <class T_, class S_>
struct xent_types {
  using T = T_;
  using S = S_;
};
TEST_CASE_TEMPLATE("vocabulary-parallel cross-entropy pieces", E, xent_types<float, float>, xent_types<double, double>,
                   xent_types<bf16, float>) {
  using T = typename E::T;
  using S = typename E::S;
  constexpr bool bf = std::is_same_v<T, bf16>;
  const auto stats_close = [](const std::vector<S>& dev, const std::vector<S>& ref, double floor,
                              const std::string& what) {
    if constexpr (bf) expect_near(dev, ref, tol_mixed, floor, what);
    else expect_close(dev, ref, tol<T>, what);
  };
  fixture f;
  for (const auto& s : shapes)
    for (std::size_t parts : {std::size_t(1), std::size_t(3)}) {
      const std::size_t rows = s.rows, local = s.cols, V = local * parts;
      auto labels = random_ids(rows, 0, std::int32_t(V));
      auto dlab = to_dev(f.q, labels);
      for (std::size_t p = 0; p < parts; ++p) {
        const std::size_t off = p * local;
        std::vector<T> logits;
        if constexpr (bf) logits = random_bf16(rows * local, -5, 5);
        else logits = random_vec<T>(rows * local, -5, 5);
        auto dlog = to_dev(f.q, logits);
        const T* dl_in = dlog.data();
        std::vector<S> mx(rows), se(rows), tg(rows), loss(rows);
        std::vector<T> dl(rows * local);
        hb::xent_local_max(f.hq, rows, local, logits.data(), mx.data());
        hb::xent_local_sumexp(f.hq, rows, local, logits.data(), mx.data(), se.data());
        hb::xent_target_logit(f.hq, rows, local, logits.data(), labels.data(), off, tg.data());
        hb::xent_loss(f.hq, rows, mx.data(), se.data(), tg.data(), loss.data());
        hb::xent_local_backward(f.hq, rows, local, logits.data(), labels.data(), off, mx.data(), se.data(), 0.5,
                                dl.data());
        auto dmx = poisoned<S>(f.q, rows), dse = poisoned<S>(f.q, rows), dtg = poisoned<S>(f.q, rows);
        auto dloss = poisoned<S>(f.q, rows);
        auto ddl = poisoned<T>(f.q, rows * local);
        cu::xent_local_max(f.q, rows, local, dl_in, dmx.data());
        expect_close(to_host(f.q, dmx, rows), mx, 0.0, "row max");  // a max of exact values: exact
        // Feed identical statistics to both sides from here on.
        auto hmx = to_dev(f.q, mx), hse = to_dev(f.q, se), htg = to_dev(f.q, tg);
        const S* cmx = hmx.data();
        const S* cse = hse.data();
        cu::xent_local_sumexp(f.q, rows, local, dl_in, cmx, dse.data());
        cu::xent_target_logit(f.q, rows, local, dl_in, dlab.data(), off, dtg.data());
        cu::xent_loss(f.q, rows, cmx, cse, static_cast<const S*>(htg.data()), dloss.data());
        cu::xent_local_backward(f.q, rows, local, dl_in, dlab.data(), off, cmx, cse, 0.5, ddl.data());
        const std::string what = std::to_string(rows) + "x" + std::to_string(local) + " part " + std::to_string(p);
        // sum_exp >= 1 whenever the slice holds the row max; an all-small slice sums to less.
        stats_close(to_host(f.q, dse, rows), se, 1e-30, "sumexp " + what);
        expect_close(to_host(f.q, dtg, rows), tg, 0.0, "target " + what);
        stats_close(to_host(f.q, dloss, rows), loss, 1e-6, "loss " + what);
        if constexpr (bf) expect_bf16_close(to_host(f.q, ddl, rows * local), dl, 1e-6, "dlogits " + what);
        else expect_close(to_host(f.q, ddl, rows * local), dl, tol<T>, "dlogits " + what);
      }
    }
  // Empty slice: row max is -inf.
  auto dmx = poisoned<S>(f.q, 4);
  cu::xent_local_max(f.q, 4, 0, static_cast<const T*>(nullptr), dmx.data());
  for (S v : to_host(f.q, dmx, 4)) CHECK(v == -std::numeric_limits<S>::infinity());
}

TEST_CASE_TEMPLATE("loss_accumulate keeps the loss books on the device", T, float, double) {
  fixture f;
  for (std::size_t rows : {std::size_t(1), std::size_t(7), std::size_t(1000)})
    for (std::size_t valid : {std::size_t(0), std::size_t(5), std::size_t(-1)}) {
      auto loss = random_vec<T>(rows, 0, 3), target = random_vec<T>(rows), mx = random_vec<T>(rows);
      std::vector<double> acc = {1.5, 2.0, 3.0};
      hb::queue hq(1);
      auto ref = acc;
      hb::loss_accumulate(hq, rows, valid, loss.data(), target.data(), mx.data(), ref.data());
      auto dl = to_dev(f.q, loss), dt = to_dev(f.q, target), dm = to_dev(f.q, mx);
      auto dacc = to_dev(f.q, acc);
      cu::loss_accumulate(f.q, rows, valid, dl.data(), dt.data(), dm.data(), dacc.data());
      const auto got = to_host(f.q, dacc, 3);
      CHECK(got[0] == doctest::Approx(ref[0]).epsilon(1e-12));
      CHECK(got[1] == ref[1]);
      CHECK(got[2] == ref[2]);
    }
}

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

// ---------------------------------------------------------------------------
// LayerNorm
// ---------------------------------------------------------------------------

TEST_CASE_TEMPLATE("layernorm forward and backward (all optional outputs)", T, float, double) {
  fixture f;
  const rc extra[] = {{2000, 64}, {1500, 1024}, {7, 5000}};
  std::vector<rc> all(std::begin(shapes), std::end(shapes));
  all.insert(all.end(), std::begin(extra), std::end(extra));
  for (const auto& s : all)
    for (int affine = 0; affine < 2; ++affine) {
      const std::size_t n = s.rows * s.cols, D = s.cols;
      auto x = random_vec<T>(n, -2, 3), gamma = random_vec<T>(D, 0.5, 1.5), beta = random_vec<T>(D);
      auto dy = random_vec<T>(n);
      const T* g = affine ? gamma.data() : nullptr;
      std::vector<T> y(n), mean(s.rows), rstd(s.rows);
      hb::layernorm_forward(f.hq, s.rows, D, x.data(), g, affine ? beta.data() : nullptr, 1e-5, y.data(), mean.data(),
                            rstd.data());
      auto dx = to_dev(f.q, x), dgam = to_dev(f.q, gamma), dbet = to_dev(f.q, beta), ddy = to_dev(f.q, dy);
      auto dyo = poisoned<T>(f.q, n), dmean = poisoned<T>(f.q, s.rows), drstd = poisoned<T>(f.q, s.rows);
      const T* dg = affine ? dgam.data() : nullptr;
      cu::layernorm_forward(f.q, s.rows, D, dx.data(), dg, affine ? dbet.data() : nullptr, 1e-5, dyo.data(),
                            dmean.data(), drstd.data());
      const std::string what = std::to_string(s.rows) + "x" + std::to_string(D) + " affine=" + std::to_string(affine);
      expect_close(to_host(f.q, dyo, n), y, tol<T>, "y " + what);
      expect_close(to_host(f.q, dmean, s.rows), mean, tol<T>, "mean " + what);
      expect_close(to_host(f.q, drstd, s.rows), rstd, tol<T>, "rstd " + what);
      // Backward from the same (host) statistics.
      auto hmean = to_dev(f.q, mean), hrstd = to_dev(f.q, rstd);
      for (int mask = 1; mask < 8; ++mask)
        for (bool accumulate : {false, true}) {
          const bool want_dx = mask & 1, want_dg = mask & 2, want_db = mask & 4;
          auto g0 = random_vec<T>(D), b0 = random_vec<T>(D);
          std::vector<T> rdx(n), rdg = g0, rdb = b0;
          hb::layernorm_backward(f.hq, s.rows, D, x.data(), g, mean.data(), rstd.data(), dy.data(),
                                 want_dx ? rdx.data() : nullptr, want_dg ? rdg.data() : nullptr,
                                 want_db ? rdb.data() : nullptr, accumulate);
          auto ddx = poisoned<T>(f.q, n);
          auto ddg = accumulate ? to_dev(f.q, g0) : poisoned<T>(f.q, D);
          auto ddb = accumulate ? to_dev(f.q, b0) : poisoned<T>(f.q, D);
          cu::layernorm_backward(f.q, s.rows, D, dx.data(), dg, hmean.data(), hrstd.data(), ddy.data(),
                                 want_dx ? ddx.data() : nullptr, want_dg ? ddg.data() : nullptr,
                                 want_db ? ddb.data() : nullptr, accumulate);
          const std::string w2 = what + " mask=" + std::to_string(mask) + " acc=" + std::to_string(accumulate);
          if (want_dx) expect_close(to_host(f.q, ddx, n), rdx, tol<T>, "dx " + w2);
          if (want_dg) expect_close(to_host(f.q, ddg, D), rdg, tol<T>, "dgamma " + w2);
          if (want_db) expect_close(to_host(f.q, ddb, D), rdb, tol<T>, "dbeta " + w2);
          if (want_dg && !accumulate) {  // bitwise repeatable
            const auto first = to_host(f.q, ddg, D);
            cu::layernorm_backward(f.q, s.rows, D, dx.data(), dg, hmean.data(), hrstd.data(), ddy.data(),
                                   static_cast<T*>(nullptr), ddg.data(), static_cast<T*>(nullptr), false);
            CHECK(to_host(f.q, ddg, D) == first);
          }
        }
    }
}

TEST_CASE("layernorm: bf16 activations and parameters, float statistics and gradients") {
  fixture f;
  const rc extra[] = {{2000, 64}, {1500, 1024}, {7, 5000}};
  std::vector<rc> all(std::begin(shapes), std::end(shapes));
  all.insert(all.end(), std::begin(extra), std::end(extra));
  for (const auto& s : all)
    for (int affine = 0; affine < 2; ++affine) {
      const std::size_t n = s.rows * s.cols, D = s.cols;
      auto x = random_bf16(n, -2, 3), gamma = random_bf16(D, 0.5, 1.5), beta = random_bf16(D);
      auto dy = random_bf16(n);
      const bf16* g = affine ? gamma.data() : nullptr;
      std::vector<bf16> y(n);
      std::vector<float> mean(s.rows), rstd(s.rows);
      hb::layernorm_forward(f.hq, s.rows, D, x.data(), g, affine ? beta.data() : nullptr, 1e-5, y.data(), mean.data(),
                            rstd.data());
      auto dx = to_dev(f.q, x), dgam = to_dev(f.q, gamma), dbet = to_dev(f.q, beta), ddy = to_dev(f.q, dy);
      auto dyo = poisoned<bf16>(f.q, n);
      auto dmean = poisoned<float>(f.q, s.rows), drstd = poisoned<float>(f.q, s.rows);
      const bf16* dg = affine ? dgam.data() : nullptr;
      const bf16* db_in = affine ? dbet.data() : nullptr;
      cu::layernorm_forward(f.q, s.rows, D, static_cast<const bf16*>(dx.data()), dg, db_in, 1e-5, dyo.data(),
                            dmean.data(), drstd.data());
      const std::string what =
          "bf16 " + std::to_string(s.rows) + "x" + std::to_string(D) + " affine=" + std::to_string(affine);
      // y: both normalize in double from double statistics and round once.
      expect_bf16_close(to_host(f.q, dyo, n), y, 0.0, "y " + what);
      expect_near(to_host(f.q, dmean, s.rows), mean, tol_mixed, 1e-9, "mean " + what);
      expect_near(to_host(f.q, drstd, s.rows), rstd, tol_mixed, 0.0, "rstd " + what);
      // Backward from the same (host) statistics.
      auto hmean = to_dev(f.q, mean), hrstd = to_dev(f.q, rstd);
      const float* dmu = hmean.data();
      const float* drs = hrstd.data();
      for (int mask = 1; mask < 8; ++mask)
        for (bool accumulate : {false, true}) {
          const bool want_dx = mask & 1, want_dg = mask & 2, want_db = mask & 4;
          auto g0 = random_vec<float>(D), b0 = random_vec<float>(D);
          std::vector<bf16> rdx(n);
          std::vector<float> rdg = g0, rdb = b0;
          hb::layernorm_backward(f.hq, s.rows, D, x.data(), g, mean.data(), rstd.data(), dy.data(),
                                 want_dx ? rdx.data() : nullptr, want_dg ? rdg.data() : nullptr,
                                 want_db ? rdb.data() : nullptr, accumulate);
          auto ddx = poisoned<bf16>(f.q, n);
          auto ddg = accumulate ? to_dev(f.q, g0) : poisoned<float>(f.q, D);
          auto ddb = accumulate ? to_dev(f.q, b0) : poisoned<float>(f.q, D);
          cu::layernorm_backward(f.q, s.rows, D, static_cast<const bf16*>(dx.data()), dg, dmu, drs,
                                 static_cast<const bf16*>(ddy.data()), want_dx ? ddx.data() : nullptr,
                                 want_dg ? ddg.data() : nullptr, want_db ? ddb.data() : nullptr, accumulate);
          const std::string w2 = what + " mask=" + std::to_string(mask) + " acc=" + std::to_string(accumulate);
          // dx = rstd (g - mean(g) - xhat mean(g xhat)): terms up to ~5, the
          // device's float intermediates (~1e-6 absolute) may cancel near 0.
          if (want_dx) expect_bf16_close(to_host(f.q, ddx, n), rdx, 1e-5, "dx " + w2);
          // Column sums over rows of dy * xhat (|.| <~ 3) and dy (|.| <= 1);
          // the device rounds each product to float before the double sum.
          if (want_dg)
            expect_near(to_host(f.q, ddg, D), rdg, tol_mixed, 3e-7 * double(s.rows) + 1e-6, "dgamma " + w2);
          if (want_db)
            expect_near(to_host(f.q, ddb, D), rdb, tol_mixed, 1e-7 * double(s.rows) + 1e-6, "dbeta " + w2);
        }
    }
}

// ---------------------------------------------------------------------------
// Ids and embeddings
// ---------------------------------------------------------------------------

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

TEST_CASE("cast_ids truncates toward zero; unrepresentable values become INT32_MIN") {
  fixture f;
  const std::vector<double> v = {0.0, 1.9, -1.9, 7.0, 2147483647.0, -2147483648.0, 2147483648.0, -1e300,
                                 std::numeric_limits<double>::quiet_NaN()};
  const std::vector<std::int32_t> want = {0, 1, -1, 7, INT32_MAX, INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN};
  auto dv = to_dev(f.q, v);
  auto di = cu::buffer<std::int32_t>(v.size());
  cu::cast_ids(f.q, v.size(), dv.data(), di.data());
  CHECK(to_host(f.q, di, v.size()) == want);
  const std::vector<float> vf = {3.0f, 12345.0f, -0.5f, 16777216.0f};
  auto dvf = to_dev(f.q, vf);
  cu::cast_ids(f.q, vf.size(), dvf.data(), di.data());
  CHECK(to_host(f.q, di, vf.size()) == std::vector<std::int32_t>{3, 12345, 0, 16777216});
}

// Embedding element types: table/activations T, gradient table G.
template <class T_, class G_>
struct emb_types {
  using T = T_;
  using G = G_;
};
template <class T>
std::vector<T> random_of(std::size_t n) {
  if constexpr (std::is_same_v<T, bf16>) return random_bf16(n);
  else return random_vec<T>(n);
}

TEST_CASE_TEMPLATE("embedding forward and backward (vocabulary slices, repeated ids)", E, emb_types<float, float>,
                   emb_types<double, double>, emb_types<bf16, float>) {
  using T = typename E::T;
  using G = typename E::G;
  fixture f;
  const rc es[] = {{1, 1}, {7, 3}, {64, 128}, {300, 33}, {1000, 256}, {50, 1030}};
  for (const auto& s : es)
    for (std::size_t parts : {std::size_t(1), std::size_t(4)}) {
      const std::size_t rows = s.rows, D = s.cols, V = 37 * parts, local = V / parts;
      auto ids = random_ids(rows, 0, std::int32_t(V));
      auto dids = to_dev(f.q, ids);
      for (std::size_t p = 0; p < parts; ++p) {
        const std::size_t off = p * local;
        auto table = random_of<T>(local * D), dout = random_of<T>(rows * D);
        auto init = random_vec<G>(local * D);
        std::vector<T> out(rows * D);
        hb::embedding_forward(f.hq, rows, D, ids.data(), table.data(), off, local, out.data());
        auto dtab = to_dev(f.q, table), ddout = to_dev(f.q, dout);
        auto dout_fwd = poisoned<T>(f.q, rows * D);
        cu::embedding_forward(f.q, rows, D, dids.data(), static_cast<const T*>(dtab.data()), off, local,
                              dout_fwd.data());
        const std::string what = std::to_string(rows) + "x" + std::to_string(D) + " part " + std::to_string(p);
        // A copy (and +0 outside the slice): the same values.
        INFO("forward " << what);
        CHECK(to_host(f.q, dout_fwd, rows * D) == out);
        for (bool accumulate : {false, true}) {
          std::vector<G> ref = init;
          hb::embedding_backward(f.hq, rows, D, ids.data(), dout.data(), off, local, ref.data(), accumulate);
          auto dg = accumulate ? to_dev(f.q, init) : poisoned<G>(f.q, local * D);
          cu::embedding_backward(f.q, rows, D, dids.data(), static_cast<const T*>(ddout.data()), off, local,
                                 dg.data(), accumulate);
          // Same additions (of exactly widened values) in the same order as the host.
          if constexpr (std::is_same_v<T, G>)
            CHECK(to_host(f.q, dg, local * D) == ref);
          else
            expect_near(to_host(f.q, dg, local * D), ref, tol_mixed, 1e-6,
                        "backward " + what + " acc=" + std::to_string(accumulate));
        }
      }
    }
}

// ---------------------------------------------------------------------------
// BLAS-1, reductions, copies
// ---------------------------------------------------------------------------

TEST_CASE_TEMPLATE("sum, sum_squares, scale, axpy, copy, copy_2d, fill, all_finite", T, float, double) {
  fixture f;
  for (std::size_t n : {std::size_t(1), std::size_t(3), std::size_t(1000), std::size_t(65537),
                        std::size_t(3000001)}) {
    auto x = random_vec<T>(n), y = random_vec<T>(n);
    auto dx = to_dev(f.q, x), dy = to_dev(f.q, y);
    const std::string what = "n=" + std::to_string(n);
    const double hs = hb::sum(f.hq, n, x.data()), ds = cu::sum(f.q, n, dx.data());
    CHECK(std::abs(ds - hs) <= 1e-12 * std::max(1.0, std::abs(hs)) * std::sqrt(double(n)));
    const double hq2 = hb::sum_squares(f.hq, n, x.data()), dq2 = cu::sum_squares(f.q, n, dx.data());
    CHECK(std::abs(dq2 - hq2) <= 1e-12 * hq2);
    std::vector<T> sx = x, ay = y;
    hb::scale(f.hq, n, -0.3, sx.data());
    hb::axpy(f.hq, n, 1.7, x.data(), ay.data());
    auto dsx = to_dev(f.q, x);
    cu::scale(f.q, n, -0.3, dsx.data());
    cu::axpy(f.q, n, 1.7, static_cast<const T*>(dx.data()), dy.data());
    expect_close(to_host(f.q, dsx, n), sx, tol<T>, "scale " + what);
    expect_close(to_host(f.q, dy, n), ay, tol<T>, "axpy " + what);
    auto dc = poisoned<T>(f.q, n);
    cu::copy(f.q, n, static_cast<const T*>(dx.data()), dc.data());
    CHECK(to_host(f.q, dc, n) == x);
    auto df = poisoned<T>(f.q, n);
    cu::fill(f.q, n, T(2.5), df.data());
    CHECK(to_host(f.q, df, n) == std::vector<T>(n, T(2.5)));
    cu::fill(f.q, n, T(0), df.data());
    CHECK(to_host(f.q, df, n) == std::vector<T>(n, T(0)));
    // Misaligned starts take the scalar paths.
    if (n > 2) {
      std::vector<T> s2(x.begin() + 1, x.end());
      hb::scale(f.hq, n - 1, 3.0, s2.data());
      auto d2 = to_dev(f.q, x);
      cu::scale(f.q, n - 1, 3.0, d2.data() + 1);
      expect_close(to_host(f.q, d2.data() + 1, n - 1), s2, tol<T>, "scale offset " + what);
    }
    CHECK(cu::all_finite(f.q, n, dx.data()));
    CHECK(cu::all_finite(f.q, n, x.data()));  // pageable host memory
    for (T bad : {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity(),
                  -std::numeric_limits<T>::infinity()}) {
      auto xb = x;
      xb[n - 1] = bad;
      auto dxb = to_dev(f.q, xb);
      CHECK_FALSE(cu::all_finite(f.q, n, dxb.data()));
      CHECK_FALSE(cu::all_finite(f.q, n, xb.data()));
    }
  }
  CHECK(cu::sum(f.q, 0, static_cast<const T*>(nullptr)) == 0.0);
  // copy_2d: a 5 x 7 block between padded layouts, device to device and host to device.
  const std::size_t rows = 5, cols = 7, ls = 11, ld = 9;
  auto src = random_vec<T>(rows * ls);
  auto dsrc = to_dev(f.q, src);
  auto ddst = poisoned<T>(f.q, rows * ld);
  cu::copy_2d(f.q, rows, cols, static_cast<const T*>(dsrc.data()), ls, ddst.data(), ld);
  auto got = to_host(f.q, ddst, rows * ld);
  bool same = true;
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < ld; ++c) same &= c < cols ? got[r * ld + c] == src[r * ls + c] : std::isnan(got[r * ld + c]);
  CHECK(same);
  auto ddst2 = poisoned<T>(f.q, rows * ld);
  cu::copy_2d(f.q, rows, cols, src.data(), ls, ddst2.data(), ld);
  auto got2 = to_host(f.q, ddst2, rows * ld);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) CHECK(got2[r * ld + c] == src[r * ls + c]);
  CHECK_THROWS_AS(cu::copy_2d(f.q, rows, cols, src.data(), 3, ddst2.data(), ld), std::invalid_argument);
}

namespace {
// Inputs for conversions into bf16: random values over many binades, random
// bit patterns (NaNs, infinities, subnormals included), and the edge cases
// of round-to-nearest-even.
std::vector<float> float_cast_inputs(std::size_t n) {
  std::vector<float> v;
  v.reserve(n + 64);
  std::uniform_int_distribution<std::uint32_t> any;
  std::uniform_real_distribution<double> mag(-40.0, 40.0);
  for (std::size_t i = 0; i < n; ++i) {
    if (i % 2 == 0)
      v.push_back(std::bit_cast<float>(any(rng())));
    else
      v.push_back(float((i % 4 == 1 ? 1.0 : -1.0) * std::exp2(mag(rng()))));
  }
  const std::uint32_t edges[] = {
      0x00000000u, 0x80000000u,              // +-0
      0x3f808000u, 0x3f818000u, 0xbf808000u,  // ties: to even (down), to even (up), negative
      0x3f808001u, 0x3f807fffu,              // just above / below a tie
      0x7f7fffffu, 0xff7fffffu, 0x7f7f7fffu, 0x7f7f8000u,  // overflow to +-Inf, largest bf16, its tie
      0x7f800000u, 0xff800000u,              // +-Inf
      0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fbfffffu,  // quiet and signalling NaNs
      0x00000001u, 0x00008000u, 0x00018000u, 0x007fffffu, 0x00800000u, 0x807f8000u,  // subnormals, tiny ties
  };
  for (std::uint32_t b : edges) v.push_back(std::bit_cast<float>(b));
  return v;
}
}  // namespace

TEST_CASE("cast_elements: float, double and bf16 conversions are bit-exact against the host") {
  fixture f;
  for (std::size_t n : {std::size_t(1), std::size_t(7), std::size_t(8), std::size_t(1003), std::size_t(65537),
                        std::size_t(1000003)}) {
    const std::string what = " n=" + std::to_string(n);
    // float -> bf16 (round to nearest even) and back (exact).
    auto xf = float_cast_inputs(n);
    const std::size_t m = xf.size();
    std::vector<bf16> ref_b(m);
    hb::cast_elements(f.hq, m, xf.data(), ref_b.data());
    auto dxf = to_dev(f.q, xf);
    auto db = poisoned<bf16>(f.q, m);
    cu::cast_elements(f.q, m, static_cast<const float*>(dxf.data()), db.data());
    const auto got_b = to_host(f.q, db, m);
    expect_same_bits(got_b, ref_b, "float -> bf16" + what);
    std::vector<float> ref_f(m);
    hb::cast_elements(f.hq, m, ref_b.data(), ref_f.data());
    auto dbin = to_dev(f.q, ref_b);
    auto df = poisoned<float>(f.q, m);
    cu::cast_elements(f.q, m, static_cast<const bf16*>(dbin.data()), df.data());
    expect_same_bits(to_host(f.q, df, m), ref_f, "bf16 -> float" + what);
    // Misaligned starts take the scalar path.
    if (m > 2) {
      std::vector<bf16> ref_o(m - 1);
      hb::cast_elements(f.hq, m - 1, xf.data() + 1, ref_o.data());
      auto dbo = poisoned<bf16>(f.q, m);
      cu::cast_elements(f.q, m - 1, static_cast<const float*>(dxf.data()) + 1, dbo.data() + 1);
      expect_same_bits(to_host(f.q, dbo.data() + 1, m - 1), ref_o, "float -> bf16 offset" + what);
      std::vector<float> ref_fo(m - 1);
      hb::cast_elements(f.hq, m - 1, ref_b.data() + 1, ref_fo.data());
      auto dfo = poisoned<float>(f.q, m);
      cu::cast_elements(f.q, m - 1, static_cast<const bf16*>(dbin.data()) + 1, dfo.data() + 1);
      expect_same_bits(to_host(f.q, dfo.data() + 1, m - 1), ref_fo, "bf16 -> float offset" + what);
    }
    // double <-> bf16 and double <-> float.
    std::vector<double> xd(m);
    for (std::size_t i = 0; i < m; ++i) xd[i] = double(xf[i]) * (1.0 + std::ldexp(double(i % 5), -30));
    std::vector<bf16> ref_db(m);
    std::vector<float> ref_df(m);
    std::vector<double> ref_bd(m), ref_fd(m);
    hb::cast_elements(f.hq, m, xd.data(), ref_db.data());
    hb::cast_elements(f.hq, m, xd.data(), ref_df.data());
    hb::cast_elements(f.hq, m, ref_b.data(), ref_bd.data());
    hb::cast_elements(f.hq, m, xf.data(), ref_fd.data());
    auto dxd = to_dev(f.q, xd);
    auto d_db = poisoned<bf16>(f.q, m);
    auto d_df = poisoned<float>(f.q, m);
    auto d_bd = poisoned<double>(f.q, m), d_fd = poisoned<double>(f.q, m);
    cu::cast_elements(f.q, m, static_cast<const double*>(dxd.data()), d_db.data());
    cu::cast_elements(f.q, m, static_cast<const double*>(dxd.data()), d_df.data());
    cu::cast_elements(f.q, m, static_cast<const bf16*>(dbin.data()), d_bd.data());
    cu::cast_elements(f.q, m, static_cast<const float*>(dxf.data()), d_fd.data());
    expect_same_bits(to_host(f.q, d_db, m), ref_db, "double -> bf16" + what);
    expect_same_bits(to_host(f.q, d_df, m), ref_df, "double -> float" + what);
    expect_same_bits(to_host(f.q, d_bd, m), ref_bd, "bf16 -> double" + what);
    expect_same_bits(to_host(f.q, d_fd, m), ref_fd, "float -> double" + what);
  }
  // Every bf16 bit pattern to float: exact (the high half of the float).
  std::vector<bf16> every(65536);
  for (std::size_t i = 0; i < every.size(); ++i) every[i] = bf16::from_bits(static_cast<std::uint16_t>(i));
  std::vector<float> ref(every.size());
  hb::cast_elements(f.hq, every.size(), every.data(), ref.data());
  auto de = to_dev(f.q, every);
  auto df = poisoned<float>(f.q, every.size());
  cu::cast_elements(f.q, every.size(), static_cast<const bf16*>(de.data()), df.data());
  const auto got = to_host(f.q, df, every.size());
  bool exact = true;
  for (std::size_t i = 0; i < got.size(); ++i) exact &= bits_of(got[i]) == (std::uint32_t(i) << 16);
  CHECK(exact);
  expect_same_bits(got, ref, "every bf16 -> float");
  CHECK_THROWS_AS(cu::cast_elements(f.q, 3, static_cast<const float*>(nullptr), static_cast<bf16*>(nullptr)), std::invalid_argument);
}

TEST_CASE("all_finite, sum and sum_squares on bf16") {
  fixture f;
  for (std::size_t n : {std::size_t(1), std::size_t(3), std::size_t(1000), std::size_t(65537),
                        std::size_t(3000001)}) {
    auto x = random_bf16(n);
    x[0] = bf16::from_bits(0x7f7f);  // the largest finite bf16 is finite
    auto dx = to_dev(f.q, x);
    const std::string what = "bf16 n=" + std::to_string(n);
    INFO(what);
    CHECK(cu::all_finite(f.q, n, static_cast<const bf16*>(dx.data())));
    CHECK(cu::all_finite(f.q, n, static_cast<const bf16*>(x.data())));  // pageable host memory
    CHECK(hb::all_finite(f.hq, n, x.data()));
    for (std::uint16_t bad : {std::uint16_t(0x7fc0), std::uint16_t(0xffff), std::uint16_t(0x7f80),
                              std::uint16_t(0xff80), std::uint16_t(0x7f81)}) {
      auto xb = x;
      xb[n - 1] = bf16::from_bits(bad);
      auto dxb = to_dev(f.q, xb);
      CHECK_FALSE(cu::all_finite(f.q, n, static_cast<const bf16*>(dxb.data())));
      CHECK_FALSE(cu::all_finite(f.q, n, static_cast<const bf16*>(xb.data())));
      CHECK_FALSE(hb::all_finite(f.hq, n, xb.data()));
    }
    // Sums of the exact float values in double: only the order differs.
    x[0] = bf16(0.5f);
    auto dx2 = to_dev(f.q, x);
    double habs = 0;
    for (bf16 v : x) habs += std::abs(as_double(v));
    const double hs = hb::sum(f.hq, n, x.data()), hq2 = hb::sum_squares(f.hq, n, x.data());
    const double ds = cu::sum(f.q, n, static_cast<const bf16*>(dx2.data()));
    const double dq2 = cu::sum_squares(f.q, n, static_cast<const bf16*>(dx2.data()));
    CHECK(std::abs(ds - hs) <= 1e-14 * habs);
    CHECK(std::abs(dq2 - hq2) <= 1e-14 * hq2);
  }
}

// ---------------------------------------------------------------------------
// Optimizers
// ---------------------------------------------------------------------------

TEST_CASE_TEMPLATE("sgd_momentum_step and adam_step follow the host over several steps", T, float, double) {
  fixture f;
  for (std::size_t n : {std::size_t(1), std::size_t(5), std::size_t(16385), std::size_t(100003)}) {
    for (double wd : {0.0, 0.01})
      for (double mom : {0.0, 0.9}) {
        auto p = random_vec<T>(n), vel = std::vector<T>(n, T(0));
        auto dp = to_dev(f.q, p), dvel = to_dev(f.q, vel);
        for (int step = 0; step < 3; ++step) {
          auto g = random_vec<T>(n);
          auto dg = to_dev(f.q, g);
          hb::sgd_momentum_step(f.hq, n, 0.1, mom, wd, p.data(), g.data(), mom != 0.0 ? vel.data() : nullptr);
          cu::sgd_momentum_step(f.q, n, 0.1, mom, wd, dp.data(), static_cast<const T*>(dg.data()),
                                mom != 0.0 ? dvel.data() : nullptr);
        }
        expect_close(to_host(f.q, dp, n), p, tol<T>, "sgd n=" + std::to_string(n));
      }
    for (bool decoupled : {false, true})
      for (double wd : {0.0, 0.05})
        for (double beta1 : {0.9, 0.3}) {
          auto p = random_vec<T>(n), m = std::vector<T>(n, T(0)), v = std::vector<T>(n, T(0));
          auto dp = to_dev(f.q, p), dm = to_dev(f.q, m), dv = to_dev(f.q, v);
          for (std::int64_t step = 1; step <= 3; ++step) {
            auto g = random_vec<T>(n);
            auto dg = to_dev(f.q, g);
            hb::adam_step(f.hq, n, 1e-3, beta1, 0.999, 1e-8, wd, step, p.data(), g.data(), m.data(), v.data(),
                          decoupled);
            cu::adam_step(f.q, n, 1e-3, beta1, 0.999, 1e-8, wd, step, dp.data(), static_cast<const T*>(dg.data()),
                          dm.data(), dv.data(), decoupled);
          }
          const std::string what = "adam n=" + std::to_string(n) + " decoupled=" + std::to_string(decoupled);
          expect_close(to_host(f.q, dp, n), p, tol<T>, what + " param");
          expect_close(to_host(f.q, dm, n), m, tol<T>, what + " m");
          expect_close(to_host(f.q, dv, n), v, tol<T>, what + " v");
        }
  }
  CHECK_THROWS_AS(cu::adam_step(f.q, 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, 0, static_cast<T*>(nullptr),
                                static_cast<const T*>(nullptr), static_cast<T*>(nullptr), static_cast<T*>(nullptr),
                                false),
                  std::invalid_argument);
}

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
    std::vector<cu::adam_tensor<T>> at;
    std::vector<cu::sgd_tensor<T>> st;
    std::size_t off = 0;
    for (auto s : sizes) {
      hb::adam_step(f.hq, s, 1e-2, 0.9, 0.999, 1e-8, 0.01, step, p.data() + off, g.data() + off, m.data() + off,
                    v.data() + off, true);
      hb::sgd_momentum_step(f.hq, s, 0.05, 0.9, 0.001, ps.data() + off, g.data() + off, vs.data() + off);
      at.push_back({dp.data() + off, dg.data() + off, dm.data() + off, dv.data() + off, s});
      st.push_back({dps.data() + off, dg.data() + off, dvs.data() + off, s});
      off += s + 1;
    }
    cu::adam_step_multi<T>(f.q, at, 1e-2, 0.9, 0.999, 1e-8, 0.01, step, true);
    cu::sgd_momentum_step_multi<T>(f.q, st, 0.05, 0.9, 0.001);
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

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    (void)cudaGetLastError();
    std::puts("no CUDA device: skipping");
    return 77;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
