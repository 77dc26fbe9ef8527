// What only the host backend's kernels promise (their values against float64
// references are the kernel suite's, test_kernels_host.cpp; GEMM: test_host_gemm.cpp):
// results bit-identical for every thread count, and invalid arguments (labels, ids,
// sizes, pointers) rejected with std::out_of_range / std::invalid_argument, naming
// the offender, before any output is written; and the float formulas written for the
// host's vectorised loops (core/math.hpp: e^x − 1 and tanh without libm) against float64.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "strata/backend/host/kernels.hpp"
#include "strata/core/math.hpp"

namespace {

using strata::bf16;
using strata::backend::activation;
namespace host = strata::backend::host;

std::vector<float> rand_f(std::size_t n, std::uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}
std::vector<std::int32_t> rand_labels(std::size_t n, std::size_t classes, std::uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<std::int32_t> d(0, std::int32_t(classes) - 1);
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// The message of the std::out_of_range f throws ("" if none).
template <class F>
std::string out_of_range_message(F&& f) {
  try {
    f();
  } catch (const std::out_of_range& e) {
    return e.what();
  }
  return "";
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

// ===========================================================================
// Determinism: every output of strata's own kernels is the same for any thread
// count (each element has one task and a fixed operation order; whole-tensor sums
// combine fixed chunks in order). The BLAS GEMMs make no such promise.
// ===========================================================================

TEST_CASE("host kernels: every kernel's result is bit-identical across thread counts") {
  // Large enough that rows, columns and elements are split over several tasks.
  const std::size_t R = 3000, C = 700, V = 50, n = R * C;
  const auto x = rand_f(n, 1100, -3.f, 3.f), dy = rand_f(n, 1101), bias = rand_f(C, 1102);
  const auto labels = rand_labels(R, C, 1103), ids = rand_labels(R, V, 1104);
  const auto table = rand_f(V * C, 1105);
  std::vector<bf16> xb(n);
  for (std::size_t i = 0; i < n; ++i) xb[i] = bf16(x[i]);
  std::vector<std::vector<float>> results;
  std::vector<std::vector<double>> sums;
  for (unsigned threads : {1u, 2u, 3u}) {
    CAPTURE(threads);
    host::queue q(threads);
    std::vector<float> pre(n), y(n), dx(n), probs(n), dl(n), xl(n), ln(n), lx(n), emb(n), back(n), m(n, 0.f), v(n, 0.f),
        mom(n, 0.f), p = x, ps = x, g = dy;
    std::vector<float> db(C), dg(C), dbeta(C), dtab(V * C), loss(R), mx(R), se(R), tg(R), mean(R), rstd(R);
    std::vector<bf16> cast(n);
    host::bias_activation_forward(q, activation::gelu, R, C, x.data(), bias.data(), pre.data(), y.data());
    host::activation_backward(q, activation::gelu, n, pre.data(), dy.data(), dx.data());
    host::bias_grad(q, R, C, dy.data(), db.data(), false);
    host::softmax_cross_entropy_forward(q, R, C, x.data(), labels.data(), loss.data(), probs.data());
    host::softmax_cross_entropy_backward(q, R, C, probs.data(), labels.data(), 0.5, dl.data());
    host::xent_local_max(q, R, C, x.data(), mx.data());
    host::xent_local_sumexp(q, R, C, x.data(), mx.data(), se.data());
    host::xent_target_logit(q, R, C, x.data(), labels.data(), 0, tg.data());
    host::xent_local_backward(q, R, C, x.data(), labels.data(), 0, mx.data(), se.data(), 0.5, xl.data());
    host::layernorm_forward(q, R, C, x.data(), bias.data(), bias.data(), 1e-5, ln.data(), mean.data(), rstd.data());
    host::layernorm_backward(q, R, C, x.data(), bias.data(), mean.data(), rstd.data(), dy.data(), lx.data(), dg.data(),
                             dbeta.data(), false);
    host::embedding_forward(q, R, C, ids.data(), table.data(), 0, V, emb.data());
    host::embedding_backward(q, R, C, ids.data(), dy.data(), 0, V, dtab.data(), false);
    host::adam_step(q, n, 1e-3, 0.9, 0.999, 1e-8, 0.01, 1, p.data(), g.data(), m.data(), v.data(), true);
    host::sgd_momentum_step(q, n, 0.1, 0.9, 0.01, ps.data(), g.data(), mom.data());
    host::scale(q, n, 0.75, g.data());
    host::axpy(q, n, -0.5, x.data(), g.data());
    host::cast_elements(q, n, x.data(), cast.data());
    host::cast_elements(q, n, cast.data(), back.data());
    std::vector<float> all;
    for (auto* r : {&pre,  &y,  &dx, &db,    &loss, &probs, &dl, &mx, &se, &tg, &xl,  &ln, &mean,
                    &rstd, &lx, &dg, &dbeta, &emb,  &dtab,  &p,  &m,  &v,  &ps, &mom, &g,  &back})
      all.insert(all.end(), r->begin(), r->end());
    results.push_back(std::move(all));
    sums.push_back({host::sum(q, n, x.data()), host::sum_squares(q, n, x.data()), host::sum(q, n, xb.data()),
                    host::sum_squares(q, n, xb.data())});
  }
  for (std::size_t k = 1; k < results.size(); ++k) {
    CHECK(std::memcmp(results[0].data(), results[k].data(), results[0].size() * sizeof(float)) == 0);
    CHECK(sums[k] == sums[0]);
  }
}

// ===========================================================================
// Argument checks: thrown before any output is written
// ===========================================================================

TEST_CASE("host kernels: labels outside [0, cols) throw std::out_of_range naming label, row and range") {
  host::queue q(1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x(12, 0.f), loss(3, nan), probs(12, nan);
  for (std::int32_t bad : {-1, 4, 1 << 30}) {
    const std::vector<std::int32_t> y = {0, bad, 1};
    const std::string m = out_of_range_message(
        [&] { host::softmax_cross_entropy_forward<float>(q, 3, 4, x.data(), y.data(), loss.data(), probs.data()); });
    CHECK(contains(m, "softmax_cross_entropy_forward"));
    CHECK(contains(m, "label " + std::to_string(bad) + " at row 1 is outside [0, 4)"));
    CHECK(contains(out_of_range_message([&] {
                     host::softmax_cross_entropy_backward<float>(q, 3, 4, x.data(), y.data(), 1.0, probs.data());
                   }),
                   "at row 1"));
  }
  for (float v : loss) CHECK(std::isnan(v));
  for (float v : probs) CHECK(std::isnan(v));
  // The vocabulary-parallel pieces see only their slice: negative labels are theirs to refuse.
  const std::vector<std::int32_t> neg = {0, -2, 1};
  std::vector<float> stat(3, 1.f), d(12, nan);
  CHECK(contains(
      out_of_range_message([&] { host::xent_target_logit<float>(q, 3, 4, x.data(), neg.data(), 0, stat.data()); }),
      "label -2 at row 1"));
  CHECK(contains(out_of_range_message([&] {
                   host::xent_local_backward<float>(q, 3, 4, x.data(), neg.data(), 0, stat.data(), stat.data(), 1.0,
                                                    d.data());
                 }),
                 "label -2 at row 1"));
  for (float v : d) CHECK(std::isnan(v));
}

TEST_CASE("host kernels: out-of-range token ids throw std::out_of_range naming id and position") {
  const std::vector<std::int32_t> ids = {3, 0, 9, 10, 2};
  auto message = [&](std::size_t vocab) {
    return out_of_range_message([&] { host::check_ids(ids.data(), ids.size(), vocab); });
  };
  const std::string m = message(10);
  CHECK(contains(m, "token id 10 at position 3"));
  CHECK(contains(m, "[0, 10)"));
  CHECK(message(11).empty());
  const std::vector<std::int32_t> neg = {1, -4};
  const std::string mn = out_of_range_message([&] { host::check_ids(neg.data(), 2, 100); });
  CHECK(contains(mn, "-4"));
  CHECK(contains(mn, "position 1"));
  host::queue q(1);
  CHECK_THROWS_AS(host::check_ids(q, ids.data(), ids.size(), 5), std::out_of_range);
  CHECK_THROWS_AS(host::check_ids(static_cast<const std::int32_t*>(nullptr), 3, 5), std::invalid_argument);
  // The kernels themselves reject negative ids before writing anything.
  std::vector<float> table(20, 1.f), out(8, 7.f), dtab(20, 7.f);
  CHECK_THROWS_AS(host::embedding_forward<float>(q, 2, 4, neg.data(), table.data(), 0, 5, out.data()),
                  std::out_of_range);
  CHECK_THROWS_AS(host::embedding_backward<float>(q, 2, 4, neg.data(), out.data(), 0, 5, dtab.data(), false),
                  std::out_of_range);
  for (float v : out) CHECK(v == 7.f);
  for (float v : dtab) CHECK(v == 7.f);
}

TEST_CASE("host kernels: bad sizes and null pointers throw std::invalid_argument before writing") {
  host::queue q(1);
  std::vector<float> x(12, 1.f), y(12, 7.f), s(3, 7.f);
  const std::vector<std::int32_t> labels = {0, 0, 0};
  auto untouched = [&] {
    for (float v : y) CHECK(v == 7.f);
    for (float v : s) CHECK(v == 7.f);
  };
  CHECK_THROWS_AS(host::softmax_cross_entropy_forward<float>(q, 3, 0, x.data(), labels.data(), s.data(), y.data()),
                  std::invalid_argument);
  CHECK_THROWS_AS(
      host::layernorm_forward<float>(q, 3, 0, x.data(), nullptr, nullptr, 1e-5, y.data(), s.data(), s.data()),
      std::invalid_argument);
  CHECK_THROWS_AS(host::bias_activation_forward<float>(q, activation::relu, 3, 4, nullptr, nullptr, nullptr, y.data()),
                  std::invalid_argument);
  CHECK_THROWS_AS(host::activation_backward<float>(q, activation::gelu, 12, nullptr, x.data(), y.data()),
                  std::invalid_argument);
  CHECK_THROWS_AS(host::bias_grad<float>(q, 3, 4, nullptr, y.data(), false), std::invalid_argument);
  CHECK_THROWS_AS(host::sgd_momentum_step<float>(q, 12, 0.1, 0.9, 0.0, y.data(), x.data(), nullptr),
                  std::invalid_argument);  // momentum needs a velocity
  CHECK_THROWS_AS(
      host::adam_step<float>(q, 12, 1e-3, 0.9, 0.999, 1e-8, 0.0, 1, y.data(), x.data(), nullptr, nullptr, false),
      std::invalid_argument);
  CHECK_THROWS_AS(
      host::adam_step<float>(q, 12, 1e-3, 0.9, 0.999, 1e-8, 0.0, 0, y.data(), x.data(), y.data(), y.data(), false),
      std::invalid_argument);  // steps count from 1
  CHECK_THROWS_AS(host::copy_2d<float>(q, 3, 4, x.data(), 2, y.data(), 4), std::invalid_argument);
  untouched();
}

// ===========================================================================
// Host-only forms
// ===========================================================================

TEST_CASE("host kernels: softmax probabilities may overwrite the logits; all_finite without a queue") {
  host::queue q(2);
  const std::size_t R = 65, C = 130;
  const auto x = rand_f(R * C, 100, -8.f, 8.f);
  const auto y = rand_labels(R, C, 101);
  std::vector<float> loss(R), probs(R * C), loss2(R), inplace = x;
  host::softmax_cross_entropy_forward<float>(q, R, C, x.data(), y.data(), loss.data(), probs.data());
  host::softmax_cross_entropy_forward<float>(q, R, C, inplace.data(), y.data(), loss2.data(), inplace.data());
  CHECK(std::memcmp(inplace.data(), probs.data(), probs.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(loss2.data(), loss.data(), loss.size() * sizeof(float)) == 0);

  std::vector<double> v(1000, 1.0);
  CHECK(host::all_finite<double>(v.size(), v.data()));
  v[999] = std::numeric_limits<double>::infinity();
  CHECK_FALSE(host::all_finite<double>(v.size(), v.data()));
}

// LayerNorm's float rows with γ run their own loops (eight partial sums of the statistics);
// with γ and no β they must still be the float64 formula, tails of D mod 8 and D < 8 included.
TEST_CASE("host kernels: float layernorm with gamma and no beta against float64") {
  host::queue q(1);
  for (std::size_t D : {std::size_t(3), std::size_t(13), std::size_t(64)}) {
    const std::size_t R = 5;
    const auto x = rand_f(R * D, 300 + std::uint32_t(D), -2.f, 3.f), gamma = rand_f(D, 400, 0.5f, 1.5f),
               dy = rand_f(R * D, 500);
    std::vector<float> y(R * D), mean(R), rstd(R), dx(R * D);
    host::layernorm_forward<float, float>(q, R, D, x.data(), gamma.data(), nullptr, 1e-5, y.data(), mean.data(),
                                          rstd.data());
    host::layernorm_backward<float, float, float>(q, R, D, x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(),
                                                  dx.data(), nullptr, nullptr, false);
    for (std::size_t r = 0; r < R; ++r) {
      double mu = 0, var = 0, sg = 0, sgx = 0;
      for (std::size_t j = 0; j < D; ++j) mu += x[r * D + j];
      mu /= double(D);
      for (std::size_t j = 0; j < D; ++j) var += (x[r * D + j] - mu) * (x[r * D + j] - mu);
      const double rs = 1.0 / std::sqrt(var / double(D) + 1e-5);
      const double m_s = mean[r], r_s = rstd[r];  // backward runs from the stored statistics
      for (std::size_t j = 0; j < D; ++j) {
        const double g = double(dy[r * D + j]) * gamma[j];
        sg += g, sgx += g * (x[r * D + j] - m_s) * r_s;
      }
      CHECK(std::abs(mean[r] - mu) <= 1e-6 * (1 + std::abs(mu)));
      CHECK(std::abs(rstd[r] - rs) <= 1e-6 * rs);
      for (std::size_t j = 0; j < D; ++j) {
        const double want = (x[r * D + j] - mu) * rs * gamma[j];
        CHECK(std::abs(y[r * D + j] - want) <= 1e-5 * (1 + std::abs(want)));
        const double xh = (x[r * D + j] - m_s) * r_s, gj = double(dy[r * D + j]) * gamma[j];
        const double dwant = r_s * (gj - sg / double(D) - xh * sgx / double(D));
        CHECK(std::abs(dx[r * D + j] - dwant) <= 1e-5 * (1 + std::abs(dwant)));
      }
    }
  }
}

// ===========================================================================
// core/math.hpp's float formulas (the host's GeLU and flash attention loops run them so
// that they vectorise): relative error against float64 on a dense sweep, tiny results
// included, and NaN passed through.
// ===========================================================================

TEST_CASE("math: float e^x - 1 and tanh within a few ulps of float64") {
  namespace m = strata::math;
  const double ulp = std::ldexp(1.0, -23);
  double worst_expm1 = 0, worst_tanh = 0;
  for (int i = 0; i < 200000; ++i) {
    const float x = static_cast<float>(-87.0 + 87.0 * i / 200000.0);  // [-87, 0)
    const double em1 = std::expm1(double(x));
    worst_expm1 = std::max(worst_expm1, std::abs(m::expm1_nonpositive(x) - em1) / std::abs(em1));
  }
  for (int i = 0; i <= 200000; ++i) {
    const float x = static_cast<float>(-40.0 + 80.0 * i / 200000.0);  // [-40, 40]
    const double t = std::tanh(double(x));
    if (x != 0.0f) worst_tanh = std::max(worst_tanh, std::abs(m::tanh_of(x) - t) / std::abs(t));
  }
  MESSAGE("worst relative error in units of 2^-23: expm1 " << worst_expm1 / ulp << ", tanh " << worst_tanh / ulp);
  CHECK(worst_expm1 <= 2 * ulp);
  CHECK(worst_tanh <= 3 * ulp);
  CHECK(m::tanh_of(0.0f) == 0.0f);
  CHECK(std::isnan(m::tanh_of(std::numeric_limits<float>::quiet_NaN())));
}
