// Host kernels (everything but GEMM, see test_host_gemm.cpp) against plain
// float64 references on fresh random inputs, backward kernels against central
// finite differences of their forward kernels, optimizers against reference
// loops and closed-form single steps. Outputs are NaN-poisoned before every
// call so an element the kernel forgets to write fails the comparison.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <numbers>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "strata/backend/host/kernels.hpp"

namespace {

using strata::backend::activation;
namespace host = strata::backend::host;

template <class T>
constexpr double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<double> rand_d(std::size_t n, std::uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// Inputs for type T: rounded to T, and returned as the double values the
// reference must use (so only the kernel's own arithmetic is measured).
template <class T>
struct input {
  std::vector<T> t;
  std::vector<double> d;
};
template <class T>
input<T> rand_in(std::size_t n, std::uint32_t seed, double lo = -1.0, double hi = 1.0) {
  input<T> r;
  const auto v = rand_d(n, seed, lo, hi);
  r.t.assign(v.begin(), v.end());
  r.d.assign(r.t.begin(), r.t.end());
  return r;
}

template <class T>
std::vector<T> poisoned(std::size_t n) {
  return std::vector<T>(n, std::numeric_limits<T>::quiet_NaN());
}

template <class T>
std::vector<T> as(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// Norm-wise relative error ||out - ref|| / ||ref|| (NaN anywhere -> +inf).
template <class A>
double rel_err(const std::vector<A>& out, const std::vector<double>& ref) {
  REQUIRE(out.size() == ref.size());
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double d = double(out[i]) - ref[i];
    if (std::isnan(d)) return std::numeric_limits<double>::infinity();
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Central finite difference of a scalar function with respect to p.
std::vector<double> fd_grad(std::vector<double>& p, const std::function<double()>& f, double h = 1e-6) {
  std::vector<double> g(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double keep = p[i];
    p[i] = keep + h;
    const double up = f();
    p[i] = keep - h;
    const double down = f();
    p[i] = keep;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

struct rc {
  std::size_t rows, cols;
};
const rc kShapes[] = {{1, 1}, {7, 13}, {65, 130}, {128, 64}, {3, 1000}, {513, 7}};

// ---- plain float64 references -------------------------------------------

double ref_act(activation a, double x) {
  if (a == activation::relu) return x > 0 ? x : 0.0;
  if (a == activation::gelu) {
    const double c = std::sqrt(2.0 / std::numbers::pi);
    return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
  }
  return x;
}

void ref_softmax_xent(std::size_t R, std::size_t C, const std::vector<double>& x, const std::vector<std::int32_t>& y,
                      std::vector<double>& loss, std::vector<double>& probs) {
  loss.assign(R, 0);
  probs.assign(R * C, 0);
  for (std::size_t r = 0; r < R; ++r) {
    double m = -std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < C; ++j) m = std::max(m, x[r * C + j]);
    double s = 0;
    for (std::size_t j = 0; j < C; ++j) s += std::exp(x[r * C + j] - m);
    loss[r] = std::log(s) + m - x[r * C + std::size_t(y[r])];
    for (std::size_t j = 0; j < C; ++j) probs[r * C + j] = std::exp(x[r * C + j] - m) / s;
  }
}

void ref_layernorm(std::size_t R, std::size_t D, const std::vector<double>& x, const std::vector<double>& g,
                   const std::vector<double>& b, double eps, std::vector<double>& y, std::vector<double>& mean,
                   std::vector<double>& rstd) {
  y.assign(R * D, 0);
  mean.assign(R, 0);
  rstd.assign(R, 0);
  for (std::size_t r = 0; r < R; ++r) {
    double mu = 0;
    for (std::size_t j = 0; j < D; ++j) mu += x[r * D + j];
    mu /= double(D);
    double var = 0;
    for (std::size_t j = 0; j < D; ++j) var += (x[r * D + j] - mu) * (x[r * D + j] - mu);
    var /= double(D);
    mean[r] = mu;
    rstd[r] = 1.0 / std::sqrt(var + eps);
    for (std::size_t j = 0; j < D; ++j) y[r * D + j] = (x[r * D + j] - mu) * rstd[r] * g[j] + b[j];
  }
}

std::vector<std::int32_t> rand_labels(std::size_t n, std::size_t classes, std::uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<std::int32_t> d(0, std::int32_t(classes) - 1);
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

}  // namespace

// ===========================================================================
// Bias + activation
// ===========================================================================

TEST_CASE_TEMPLATE("host kernels: bias_activation_forward matches the float64 reference", T, float, double) {
  std::uint32_t seed = 1;
  for (unsigned threads : {1u, 2u})
    for (const rc& s : kShapes)
      for (activation a : {activation::none, activation::relu, activation::gelu})
        for (bool with_bias : {false, true}) {
          CAPTURE(s.rows);
          CAPTURE(s.cols);
          CAPTURE(int(a));
          host::queue q(threads);
          const auto x = rand_in<T>(s.rows * s.cols, seed++, -3, 3);
          const auto b = rand_in<T>(s.cols, seed++);
          std::vector<double> pre_ref(x.d.size()), y_ref(x.d.size());
          for (std::size_t r = 0; r < s.rows; ++r)
            for (std::size_t j = 0; j < s.cols; ++j) {
              const double v = x.d[r * s.cols + j] + (with_bias ? b.d[j] : 0.0);
              pre_ref[r * s.cols + j] = v;
              y_ref[r * s.cols + j] = ref_act(a, v);
            }
          auto pre = poisoned<T>(x.t.size()), y = poisoned<T>(x.t.size());
          host::bias_activation_forward<T>(q, a, s.rows, s.cols, x.t.data(), with_bias ? b.t.data() : nullptr,
                                           pre.data(), y.data());
          CHECK(rel_err(pre, pre_ref) <= tol<T>);
          CHECK(rel_err(y, y_ref) <= tol<T>);
          // pre may be skipped, and y may overwrite x in place.
          auto inplace = x.t;
          host::bias_activation_forward<T>(q, a, s.rows, s.cols, inplace.data(), with_bias ? b.t.data() : nullptr,
                                           nullptr, inplace.data());
          CHECK(std::memcmp(inplace.data(), y.data(), y.size() * sizeof(T)) == 0);
        }
}

TEST_CASE_TEMPLATE("host kernels: activation_backward and bias_grad match the float64 reference", T, float, double) {
  std::uint32_t seed = 50;
  for (const rc& s : kShapes)
    for (activation a : {activation::none, activation::relu, activation::gelu}) {
      host::queue q(2);
      const std::size_t n = s.rows * s.cols;
      const auto pre = rand_in<T>(n, seed++, -3, 3), dy = rand_in<T>(n, seed++);
      std::vector<double> dx_ref(n);
      for (std::size_t i = 0; i < n; ++i) {
        const double x = pre.d[i];
        double d = 1.0;
        if (a == activation::relu) d = x > 0 ? 1.0 : 0.0;
        if (a == activation::gelu) {
          const double c = std::sqrt(2.0 / std::numbers::pi), u = c * (x + 0.044715 * x * x * x), t = std::tanh(u);
          d = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
        }
        dx_ref[i] = dy.d[i] * d;
      }
      auto dx = poisoned<T>(n);
      host::activation_backward<T>(q, a, n, pre.t.data(), dy.t.data(), dx.data());
      CHECK(rel_err(dx, dx_ref) <= tol<T>);

      std::vector<double> db_ref(s.cols, 0.0);
      for (std::size_t r = 0; r < s.rows; ++r)
        for (std::size_t j = 0; j < s.cols; ++j) db_ref[j] += dy.d[r * s.cols + j];
      auto db = poisoned<T>(s.cols);
      host::bias_grad<T>(q, s.rows, s.cols, dy.t.data(), db.data(), false);
      CHECK(rel_err(db, db_ref) <= tol<T>);
      host::bias_grad<T>(q, s.rows, s.cols, dy.t.data(), db.data(), true);  // accumulate: twice the sum
      for (auto& v : db_ref) v *= 2;
      CHECK(rel_err(db, db_ref) <= tol<T>);
    }
}

TEST_CASE("host kernels: bias + activation backward match finite differences (double)") {
  host::queue q(2);
  const std::size_t R = 9, C = 11;
  for (activation a : {activation::none, activation::relu, activation::gelu}) {
    CAPTURE(int(a));
    std::vector<double> x = rand_d(R * C, 7, -2, 2), b = rand_d(C, 8), G = rand_d(R * C, 9);
    for (auto& v : x)  // keep relu's kink away from the FD stencil
      if (std::abs(v) < 1e-3) v += 1e-2;
    auto loss = [&] {
      std::vector<double> y(R * C);
      host::bias_activation_forward<double>(q, a, R, C, x.data(), b.data(), nullptr, y.data());
      return dot(G, y);
    };
    std::vector<double> pre(R * C), y(R * C), dx(R * C, kNaN), db(C, kNaN);
    host::bias_activation_forward<double>(q, a, R, C, x.data(), b.data(), pre.data(), y.data());
    host::activation_backward<double>(q, a, R * C, pre.data(), G.data(), dx.data());
    host::bias_grad<double>(q, R, C, dx.data(), db.data(), false);
    CHECK(rel_err(dx, fd_grad(x, loss)) <= 1e-6);
    CHECK(rel_err(db, fd_grad(b, loss)) <= 1e-6);
  }
}

// ===========================================================================
// Softmax cross-entropy
// ===========================================================================

TEST_CASE_TEMPLATE("host kernels: softmax cross-entropy forward/backward match the float64 reference", T, float,
                   double) {
  std::uint32_t seed = 100;
  for (unsigned threads : {1u, 2u})
    for (const rc& s : kShapes) {
      CAPTURE(s.rows);
      CAPTURE(s.cols);
      host::queue q(threads);
      const auto x = rand_in<T>(s.rows * s.cols, seed++, -8, 8);
      const auto y = rand_labels(s.rows, s.cols, seed++);
      std::vector<double> loss_ref, probs_ref;
      ref_softmax_xent(s.rows, s.cols, x.d, y, loss_ref, probs_ref);
      auto loss = poisoned<T>(s.rows), probs = poisoned<T>(s.rows * s.cols);
      host::softmax_cross_entropy_forward<T>(q, s.rows, s.cols, x.t.data(), y.data(), loss.data(), probs.data());
      CHECK(rel_err(loss, loss_ref) <= tol<T>);
      CHECK(rel_err(probs, probs_ref) <= tol<T>);
      // probs may overwrite the logits in place; loss-only calls agree too.
      auto inplace = x.t;
      auto loss2 = poisoned<T>(s.rows);
      host::softmax_cross_entropy_forward<T>(q, s.rows, s.cols, inplace.data(), y.data(), loss2.data(), inplace.data());
      CHECK(std::memcmp(inplace.data(), probs.data(), probs.size() * sizeof(T)) == 0);
      CHECK(std::memcmp(loss2.data(), loss.data(), loss.size() * sizeof(T)) == 0);
      host::softmax_cross_entropy_forward<T>(q, s.rows, s.cols, x.t.data(), y.data(), loss2.data(), nullptr);
      CHECK(std::memcmp(loss2.data(), loss.data(), loss.size() * sizeof(T)) == 0);

      const double scale = 1.0 / double(s.rows);
      std::vector<double> d_ref(probs_ref.size());
      for (std::size_t r = 0; r < s.rows; ++r)
        for (std::size_t j = 0; j < s.cols; ++j)
          d_ref[r * s.cols + j] = scale * (probs_ref[r * s.cols + j] - (std::int32_t(j) == y[r] ? 1.0 : 0.0));
      auto d = poisoned<T>(probs.size());
      host::softmax_cross_entropy_backward<T>(q, s.rows, s.cols, probs.data(), y.data(), scale, d.data());
      CHECK(rel_err(d, d_ref) <= tol<T>);
      // In place over probs is allowed.
      host::softmax_cross_entropy_backward<T>(q, s.rows, s.cols, probs.data(), y.data(), scale, probs.data());
      CHECK(std::memcmp(probs.data(), d.data(), d.size() * sizeof(T)) == 0);
    }
}

TEST_CASE("host kernels: softmax cross-entropy is stable for huge logits and loss-only calls") {
  host::queue q(1);
  const std::vector<float> x = {1000.f, 0.f, -1000.f, 88.f, 89.f, 90.f};
  const std::vector<std::int32_t> y = {0, 2};
  std::vector<float> loss(2, std::numeric_limits<float>::quiet_NaN());
  host::softmax_cross_entropy_forward<float>(q, 2, 3, x.data(), y.data(), loss.data(), nullptr);
  CHECK(loss[0] == doctest::Approx(0.0).epsilon(1e-6));
  const double expect = std::log(std::exp(-2.0) + std::exp(-1.0) + 1.0);
  CHECK(loss[1] == doctest::Approx(expect).epsilon(1e-6));
}

TEST_CASE("host kernels: softmax cross-entropy backward matches finite differences (double)") {
  host::queue q(2);
  const std::size_t R = 6, C = 9;
  std::vector<double> x = rand_d(R * C, 21, -4, 4);
  const auto y = rand_labels(R, C, 22);
  const double scale = 0.37;
  auto loss = [&] {
    std::vector<double> l(R);
    host::softmax_cross_entropy_forward<double>(q, R, C, x.data(), y.data(), l.data(), nullptr);
    double s = 0;
    for (double v : l) s += v;
    return scale * s;
  };
  std::vector<double> l(R), p(R * C), d(R * C, kNaN);
  host::softmax_cross_entropy_forward<double>(q, R, C, x.data(), y.data(), l.data(), p.data());
  host::softmax_cross_entropy_backward<double>(q, R, C, p.data(), y.data(), scale, d.data());
  CHECK(rel_err(d, fd_grad(x, loss)) <= 1e-6);
}

TEST_CASE("host kernels: softmax cross-entropy rejects labels outside [0, cols)") {
  host::queue q(1);
  std::vector<float> x(12, 0.f), l(3), p(12);
  for (std::int32_t bad : {-1, 4, 1 << 30}) {
    const std::vector<std::int32_t> y = {0, bad, 1};
    CHECK_THROWS_AS(host::softmax_cross_entropy_forward<float>(q, 3, 4, x.data(), y.data(), l.data(), p.data()),
                    std::out_of_range);
    CHECK_THROWS_AS(host::softmax_cross_entropy_backward<float>(q, 3, 4, p.data(), y.data(), 1.0, p.data()),
                    std::out_of_range);
  }
}

// Vocabulary-parallel CE: simulate `ranks` column slices in one process, doing
// the all-reduces (max, sum, sum) by hand, and compare with the unsplit kernels.
template <class T>
void check_vocab_parallel(std::size_t R, std::size_t V, std::size_t ranks, std::uint32_t seed) {
  CAPTURE(R);
  CAPTURE(V);
  CAPTURE(ranks);
  host::queue q(2);
  const auto x = rand_in<T>(R * V, seed, -6, 6);
  const auto y = rand_labels(R, V, seed + 1);
  const double scale = 0.5;

  std::vector<T> loss_full(R), probs(R * V), d_full(R * V);
  host::softmax_cross_entropy_forward<T>(q, R, V, x.t.data(), y.data(), loss_full.data(), probs.data());
  host::softmax_cross_entropy_backward<T>(q, R, V, probs.data(), y.data(), scale, d_full.data());
  std::vector<double> loss_ref, probs_ref;
  ref_softmax_xent(R, V, x.d, y, loss_ref, probs_ref);

  // Uneven split: the first V % ranks slices get one extra column.
  std::vector<std::size_t> off(ranks + 1, 0);
  for (std::size_t k = 0; k < ranks; ++k) off[k + 1] = off[k] + V / ranks + (k < V % ranks ? 1 : 0);
  std::vector<std::vector<T>> slice(ranks);
  for (std::size_t k = 0; k < ranks; ++k) {
    const std::size_t c = off[k + 1] - off[k];
    slice[k].resize(R * c);
    for (std::size_t r = 0; r < R; ++r)
      for (std::size_t j = 0; j < c; ++j) slice[k][r * c + j] = x.t[r * V + off[k] + j];
  }
  auto cols = [&](std::size_t k) { return off[k + 1] - off[k]; };

  std::vector<T> gmax(R, -std::numeric_limits<T>::infinity()), gsum(R, T(0)), gtarget(R, T(0));
  for (std::size_t k = 0; k < ranks; ++k) {  // all-reduce(max)
    auto m = poisoned<T>(R);
    host::xent_local_max<T>(q, R, cols(k), slice[k].data(), m.data());
    for (std::size_t r = 0; r < R; ++r) gmax[r] = std::max(gmax[r], m[r]);
  }
  for (std::size_t k = 0; k < ranks; ++k) {  // all-reduce(sum) of sum-exp and target logit
    auto se = poisoned<T>(R), tg = poisoned<T>(R);
    host::xent_local_sumexp<T>(q, R, cols(k), slice[k].data(), gmax.data(), se.data());
    host::xent_target_logit<T>(q, R, cols(k), slice[k].data(), y.data(), off[k], tg.data());
    for (std::size_t r = 0; r < R; ++r) gsum[r] += se[r], gtarget[r] += tg[r];
  }
  std::vector<T> d_cat(R * V);
  for (std::size_t k = 0; k < ranks; ++k) {
    auto loss = poisoned<T>(R);
    host::xent_loss<T>(q, R, gmax.data(), gsum.data(), gtarget.data(), loss.data());
    CHECK(rel_err(loss, loss_ref) <= tol<T>);
    CHECK(rel_err(loss, std::vector<double>(loss_full.begin(), loss_full.end())) <= tol<T>);
    auto d = poisoned<T>(R * cols(k));
    host::xent_local_backward<T>(q, R, cols(k), slice[k].data(), y.data(), off[k], gmax.data(), gsum.data(), scale,
                                 d.data());
    for (std::size_t r = 0; r < R; ++r)
      for (std::size_t j = 0; j < cols(k); ++j) d_cat[r * V + off[k] + j] = d[r * cols(k) + j];
  }
  CHECK(rel_err(d_cat, std::vector<double>(d_full.begin(), d_full.end())) <= tol<T>);
}

TEST_CASE_TEMPLATE("host kernels: vocabulary-parallel cross-entropy over 2 and 4 ranks equals the unsplit loss", T,
                   float, double) {
  check_vocab_parallel<T>(5, 12, 2, 1);
  check_vocab_parallel<T>(7, 13, 4, 2);
  check_vocab_parallel<T>(64, 1001, 2, 3);
  check_vocab_parallel<T>(33, 1001, 4, 4);
  check_vocab_parallel<T>(3, 3, 4, 5);  // more ranks than columns: one empty slice
}

// ===========================================================================
// LayerNorm
// ===========================================================================

TEST_CASE_TEMPLATE("host kernels: layernorm forward/backward match the float64 reference", T, float, double) {
  std::uint32_t seed = 300;
  const double eps = 1e-5;
  for (unsigned threads : {1u, 2u})
    for (const rc& s : kShapes) {
      if (s.cols < 2) continue;  // D = 1 normalises to exactly 0: nothing to compare norm-wise
      CAPTURE(s.rows);
      CAPTURE(s.cols);
      host::queue q(threads);
      const std::size_t R = s.rows, D = s.cols;
      const auto x = rand_in<T>(R * D, seed++, -2, 3), g = rand_in<T>(D, seed++, 0.5, 1.5), b = rand_in<T>(D, seed++),
                 dy = rand_in<T>(R * D, seed++);
      std::vector<double> y_ref, mean_ref, rstd_ref;
      ref_layernorm(R, D, x.d, g.d, b.d, eps, y_ref, mean_ref, rstd_ref);
      auto y = poisoned<T>(R * D), mean = poisoned<T>(R), rstd = poisoned<T>(R);
      host::layernorm_forward<T>(q, R, D, x.t.data(), g.t.data(), b.t.data(), eps, y.data(), mean.data(), rstd.data());
      CHECK(rel_err(y, y_ref) <= tol<T>);
      CHECK(rel_err(mean, mean_ref) <= tol<T>);
      CHECK(rel_err(rstd, rstd_ref) <= tol<T>);

      // Reference backward from the reference statistics.
      std::vector<double> dx_ref(R * D), dg_ref(D, 0.0), db_ref(D, 0.0);
      for (std::size_t r = 0; r < R; ++r) {
        double a = 0, c = 0;
        for (std::size_t j = 0; j < D; ++j) {
          const double xh = (x.d[r * D + j] - mean_ref[r]) * rstd_ref[r], gg = dy.d[r * D + j] * g.d[j];
          a += gg;
          c += gg * xh;
          dg_ref[j] += dy.d[r * D + j] * xh;
          db_ref[j] += dy.d[r * D + j];
        }
        a /= double(D);
        c /= double(D);
        for (std::size_t j = 0; j < D; ++j) {
          const double xh = (x.d[r * D + j] - mean_ref[r]) * rstd_ref[r];
          dx_ref[r * D + j] = rstd_ref[r] * (dy.d[r * D + j] * g.d[j] - a - xh * c);
        }
      }
      auto dx = poisoned<T>(R * D), dg = poisoned<T>(D), db = poisoned<T>(D);
      host::layernorm_backward<T>(q, R, D, x.t.data(), g.t.data(), mean.data(), rstd.data(), dy.t.data(), dx.data(),
                                  dg.data(), db.data(), false);
      CHECK(rel_err(dx, dx_ref) <= tol<T>);
      CHECK(rel_err(dg, dg_ref) <= tol<T>);
      CHECK(rel_err(db, db_ref) <= tol<T>);
      // accumulate adds to dgamma/dbeta (dx is always overwritten).
      host::layernorm_backward<T>(q, R, D, x.t.data(), g.t.data(), mean.data(), rstd.data(), dy.t.data(), nullptr,
                                  dg.data(), db.data(), true);
      for (auto& v : dg_ref) v *= 2;
      for (auto& v : db_ref) v *= 2;
      CHECK(rel_err(dg, dg_ref) <= tol<T>);
      CHECK(rel_err(db, db_ref) <= tol<T>);
    }
}

TEST_CASE("host kernels: layernorm without affine parameters or saved statistics") {
  host::queue q(1);
  const std::size_t R = 4, D = 10;
  const auto x = rand_d(R * D, 5);
  std::vector<double> ones(D, 1.0), zeros(D, 0.0), y_ref, m, s;
  ref_layernorm(R, D, x, ones, zeros, 1e-6, y_ref, m, s);
  std::vector<double> y(R * D, kNaN);
  host::layernorm_forward<double>(q, R, D, x.data(), nullptr, nullptr, 1e-6, y.data(), static_cast<double*>(nullptr), static_cast<double*>(nullptr));
  CHECK(rel_err(y, y_ref) <= 1e-12);
}

TEST_CASE("host kernels: layernorm backward matches finite differences (double)") {
  host::queue q(2);
  const std::size_t R = 5, D = 8;
  const double eps = 1e-5;
  std::vector<double> x = rand_d(R * D, 31, -2, 2), g = rand_d(D, 32, 0.5, 1.5), b = rand_d(D, 33),
                      G = rand_d(R * D, 34);
  auto loss = [&] {
    std::vector<double> y(R * D);
    host::layernorm_forward<double>(q, R, D, x.data(), g.data(), b.data(), eps, y.data(), static_cast<double*>(nullptr), static_cast<double*>(nullptr));
    return dot(G, y);
  };
  std::vector<double> y(R * D), mean(R), rstd(R), dx(R * D, kNaN), dg(D, kNaN), db(D, kNaN);
  host::layernorm_forward<double>(q, R, D, x.data(), g.data(), b.data(), eps, y.data(), mean.data(), rstd.data());
  host::layernorm_backward<double>(q, R, D, x.data(), g.data(), mean.data(), rstd.data(), G.data(), dx.data(),
                                   dg.data(), db.data(), false);
  CHECK(rel_err(dx, fd_grad(x, loss)) <= 1e-6);
  CHECK(rel_err(dg, fd_grad(g, loss)) <= 1e-6);
  CHECK(rel_err(db, fd_grad(b, loss)) <= 1e-6);
}

// ===========================================================================
// Embedding
// ===========================================================================

TEST_CASE_TEMPLATE("host kernels: embedding forward/backward, whole and vocabulary-parallel", T, float, double) {
  const std::size_t V = 23, D = 19, R = 40;
  const auto table = rand_in<T>(V * D, 400);
  const auto dout = rand_in<T>(R * D, 401);
  auto ids = rand_labels(R, V, 402);
  ids[3] = ids[7] = ids[11] = 5;  // repeated ids must accumulate
  std::vector<double> out_ref(R * D), dtab_ref(V * D, 0.0);
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t j = 0; j < D; ++j) {
      out_ref[r * D + j] = table.d[std::size_t(ids[r]) * D + j];
      dtab_ref[std::size_t(ids[r]) * D + j] += dout.d[r * D + j];
    }
  for (unsigned threads : {1u, 2u}) {
    host::queue q(threads);
    host::check_ids(ids.data(), ids.size(), V);  // valid: no throw
    auto out = poisoned<T>(R * D);
    host::embedding_forward<T>(q, R, D, ids.data(), table.t.data(), 0, V, out.data());
    CHECK(rel_err(out, out_ref) == 0.0);  // a copy is exact
    auto dtab = poisoned<T>(V * D);
    host::embedding_backward<T>(q, R, D, ids.data(), dout.t.data(), 0, V, dtab.data(), false);
    CHECK(rel_err(dtab, dtab_ref) <= tol<T>);

    // Vocabulary-parallel: 3 slices; partial outputs sum to the full lookup
    // and the gradient slices tile the full gradient.
    const std::size_t off[] = {0, 8, 15, V};
    std::vector<double> sum_out(R * D, 0.0), cat_dtab(V * D, 0.0);
    for (int k = 0; k < 3; ++k) {
      const std::size_t vl = off[k + 1] - off[k];
      auto part = poisoned<T>(R * D);
      host::embedding_forward<T>(q, R, D, ids.data(), table.t.data() + off[k] * D, off[k], vl, part.data());
      for (std::size_t i = 0; i < part.size(); ++i) sum_out[i] += double(part[i]);
      std::vector<T> dslice(vl * D, T(1));  // accumulate on top of ones
      host::embedding_backward<T>(q, R, D, ids.data(), dout.t.data(), off[k], vl, dslice.data(), true);
      for (std::size_t i = 0; i < dslice.size(); ++i) cat_dtab[off[k] * D + i] = double(dslice[i]) - 1.0;
    }
    CHECK(rel_err(sum_out, out_ref) == 0.0);
    CHECK(rel_err(cat_dtab, dtab_ref) <= tol<T>);
  }
}

TEST_CASE("host kernels: embedding backward matches finite differences (double)") {
  host::queue q(2);
  const std::size_t V = 6, D = 4, R = 9;
  std::vector<double> table = rand_d(V * D, 41), G = rand_d(R * D, 42);
  const std::vector<std::int32_t> ids = {0, 5, 2, 2, 3, 5, 5, 1, 0};
  auto loss = [&] {
    std::vector<double> out(R * D);
    host::embedding_forward<double>(q, R, D, ids.data(), table.data(), 0, V, out.data());
    return dot(G, out);
  };
  std::vector<double> dtab(V * D, kNaN);
  host::embedding_backward<double>(q, R, D, ids.data(), G.data(), 0, V, dtab.data(), false);
  CHECK(rel_err(dtab, fd_grad(table, loss)) <= 1e-6);
}

TEST_CASE("host kernels: out-of-range token ids throw std::out_of_range naming id and position") {
  const std::vector<std::int32_t> ids = {3, 0, 9, 10, 2};
  auto message = [&](std::size_t vocab) -> std::string {
    try {
      host::check_ids(ids.data(), ids.size(), vocab);
    } catch (const std::out_of_range& e) {
      return e.what();
    }
    return "";
  };
  const std::string m = message(10);
  CHECK(m.find("10") != std::string::npos);
  CHECK(m.find("position 3") != std::string::npos);
  CHECK(message(11).empty());
  const std::vector<std::int32_t> neg = {1, -4};
  CHECK_THROWS_AS(host::check_ids(neg.data(), 2, 100), std::out_of_range);
  try {
    host::check_ids(neg.data(), 2, 100);
  } catch (const std::out_of_range& e) {
    CHECK(std::string(e.what()).find("-4") != std::string::npos);
    CHECK(std::string(e.what()).find("position 1") != std::string::npos);
  }
  host::queue q(1);
  CHECK_THROWS_AS(host::check_ids(q, ids.data(), ids.size(), 5), std::out_of_range);
  // The kernels themselves reject negative ids before writing anything.
  std::vector<float> table(20, 1.f), out(8, 7.f);
  CHECK_THROWS_AS(host::embedding_forward<float>(q, 2, 4, neg.data(), table.data(), 0, 5, out.data()),
                  std::out_of_range);
  for (float v : out) CHECK(v == 7.f);
}

// ===========================================================================
// BLAS-1, reductions, finiteness
// ===========================================================================

TEST_CASE_TEMPLATE("host kernels: scale, axpy, copy, fill match the reference", T, float, double) {
  for (std::size_t n : {1u, 7u, 1000u, 100003u}) {
    host::queue q(2);
    const auto x = rand_in<T>(n, 500 + std::uint32_t(n)), y = rand_in<T>(n, 600 + std::uint32_t(n));
    auto s = x.t;
    host::scale<T>(q, n, -1.25, s.data());
    std::vector<double> ref(n);
    for (std::size_t i = 0; i < n; ++i) ref[i] = -1.25 * x.d[i];
    CHECK(rel_err(s, ref) <= tol<T>);

    auto a = y.t;
    host::axpy<T>(q, n, 0.5, x.t.data(), a.data());
    for (std::size_t i = 0; i < n; ++i) ref[i] = y.d[i] + 0.5 * x.d[i];
    CHECK(rel_err(a, ref) <= tol<T>);

    auto c = poisoned<T>(n);
    host::copy<T>(q, n, x.t.data(), c.data());
    CHECK(std::memcmp(c.data(), x.t.data(), n * sizeof(T)) == 0);

    auto f = poisoned<T>(n);
    host::fill<T>(q, n, T(3.5), f.data());
    CHECK(std::all_of(f.begin(), f.end(), [](T v) { return v == T(3.5); }));
  }
}

TEST_CASE_TEMPLATE("host kernels: sum and sum_squares are accurate and thread-count independent", T, float, double) {
  for (std::size_t n : {0u, 1u, 9u, 16384u, 16385u, 1000001u}) {
    CAPTURE(n);
    const auto x = rand_in<T>(n, 700 + std::uint32_t(n));
    double s_ref = 0, q_ref = 0;
    for (double v : x.d) s_ref += v, q_ref += v * v;
    double s1 = 0, q1 = 0;
    for (unsigned threads : {1u, 2u, 3u}) {
      host::queue q(threads);
      const double s = host::sum<T>(q, n, x.t.data()), ss = host::sum_squares<T>(q, n, x.t.data());
      CHECK(std::abs(s - s_ref) <= 1e-12 * std::max(1.0, q_ref));  // double accumulation
      CHECK(std::abs(ss - q_ref) <= 1e-12 * std::max(1.0, q_ref));
      if (threads == 1)
        s1 = s, q1 = ss;
      else
        CHECK((s == s1 && ss == q1));  // bit-identical
    }
  }
}

TEST_CASE_TEMPLATE("host kernels: all_finite detects NaN and infinities anywhere", T, float, double) {
  host::queue q(2);
  for (std::size_t n : {1u, 31u, 32768u, 100000u}) {
    std::vector<T> x = as<T>(rand_d(n, 800));
    x[0] = std::numeric_limits<T>::max();  // large but finite
    if (n > 1) x[1] = std::numeric_limits<T>::denorm_min();
    CHECK(host::all_finite<T>(q, n, x.data()));
    CHECK(host::all_finite<T>(n, x.data()));
    for (T bad : {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity(),
                  -std::numeric_limits<T>::infinity(), -std::numeric_limits<T>::quiet_NaN()})
      for (std::size_t pos : {std::size_t(0), n / 2, n - 1}) {
        auto y = x;
        y[pos] = bad;
        CHECK_FALSE(host::all_finite<T>(q, n, y.data()));
      }
  }
  CHECK(host::all_finite<T>(q, 0, static_cast<const T*>(nullptr)));
}

// ===========================================================================
// Optimizers
// ===========================================================================

TEST_CASE_TEMPLATE("host kernels: SGD with momentum follows PyTorch's update over several steps", T, float, double) {
  const std::size_t n = 70001;  // several parallel chunks
  const double lr = 0.05;
  for (double momentum : {0.0, 0.9})
    for (double wd : {0.0, 1e-2}) {
      CAPTURE(momentum);
      CAPTURE(wd);
      host::queue q(2);
      auto p = rand_in<T>(n, 900);
      std::vector<T> v(n, T(0));
      std::vector<double> pr = p.d, vr(n, 0.0);
      for (int step = 0; step < 4; ++step) {
        const auto g = rand_in<T>(n, 901 + std::uint32_t(step));
        host::sgd_momentum_step<T>(q, n, lr, momentum, wd, p.t.data(), g.t.data(), momentum != 0 ? v.data() : nullptr);
        for (std::size_t i = 0; i < n; ++i) {
          double gi = g.d[i] + wd * pr[i];
          if (momentum != 0) gi = vr[i] = momentum * vr[i] + gi;
          pr[i] -= lr * gi;
        }
      }
      CHECK(rel_err(p.t, pr) <= tol<T>);
      if (momentum != 0) CHECK(rel_err(v, vr) <= tol<T>);
    }
}

TEST_CASE("host kernels: SGD single step equals the closed form") {
  host::queue q(1);
  std::vector<double> p = {1.0, -2.0, 0.5}, g = {0.1, 0.2, -0.3}, v(3, 0.0);
  host::sgd_momentum_step<double>(q, 3, 0.1, 0.9, 0.01, p.data(), g.data(), v.data());
  // First step: v = g + wd p, p = p - lr v.
  CHECK(v[0] == doctest::Approx(0.1 + 0.01 * 1.0).epsilon(1e-15));
  CHECK(p[0] == doctest::Approx(1.0 - 0.1 * 0.11).epsilon(1e-15));
  CHECK(p[1] == doctest::Approx(-2.0 - 0.1 * (0.2 - 0.02)).epsilon(1e-15));
  CHECK(p[2] == doctest::Approx(0.5 - 0.1 * (-0.3 + 0.005)).epsilon(1e-15));
}

TEST_CASE_TEMPLATE("host kernels: Adam and AdamW follow PyTorch's update over several steps", T, float, double) {
  const std::size_t n = 70001;
  const double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  for (bool decoupled : {false, true})
    for (double wd : {0.0, 0.1}) {
      CAPTURE(decoupled);
      CAPTURE(wd);
      host::queue q(2);
      auto p = rand_in<T>(n, 1000);
      std::vector<T> m(n, T(0)), v(n, T(0));
      std::vector<double> pr = p.d, mr(n, 0.0), vr(n, 0.0);
      for (std::int64_t step = 1; step <= 5; ++step) {
        const auto g = rand_in<T>(n, 1000 + std::uint32_t(step));
        host::adam_step<T>(q, n, lr, b1, b2, eps, wd, step, p.t.data(), g.t.data(), m.data(), v.data(), decoupled);
        const double bc1 = 1 - std::pow(b1, double(step)), bc2 = 1 - std::pow(b2, double(step));
        for (std::size_t i = 0; i < n; ++i) {
          double gi = g.d[i];
          if (decoupled)
            pr[i] *= 1 - lr * wd;
          else
            gi += wd * pr[i];
          mr[i] = b1 * mr[i] + (1 - b1) * gi;
          vr[i] = b2 * vr[i] + (1 - b2) * gi * gi;
          pr[i] -= lr / bc1 * mr[i] / (std::sqrt(vr[i]) / std::sqrt(bc2) + eps);
        }
      }
      CHECK(rel_err(p.t, pr) <= tol<T>);
      CHECK(rel_err(m, mr) <= tol<T>);
      CHECK(rel_err(v, vr) <= tol<T>);
    }
}

TEST_CASE("host kernels: Adam's first step moves each parameter by lr * g / (|g| + eps)") {
  host::queue q(1);
  const double lr = 0.01, eps = 1e-8;
  const std::vector<double> p0 = {1.0, -2.0, 0.25, 3.0}, g = {0.5, -1e-3, 2.0, 1e-9};
  for (bool decoupled : {false, true})
    for (double wd : {0.0, 0.1}) {
      std::vector<double> p = p0, m(4, 0.0), v(4, 0.0);
      host::adam_step<double>(q, 4, lr, 0.9, 0.999, eps, wd, 1, p.data(), g.data(), m.data(), v.data(), decoupled);
      for (std::size_t i = 0; i < 4; ++i) {
        // Bias correction makes m_hat = g', v_hat = g'^2 after one step.
        const double ge = decoupled ? g[i] : g[i] + wd * p0[i];
        const double base = decoupled ? p0[i] * (1 - lr * wd) : p0[i];
        CHECK(p[i] == doctest::Approx(base - lr * ge / (std::abs(ge) + eps)).epsilon(1e-12));
      }
    }
  // The 1e-9 gradient (below eps scale) moves its parameter by ~lr/11, not lr.
  std::vector<double> p = p0, m(4, 0.0), v(4, 0.0);
  host::adam_step<double>(q, 4, lr, 0.9, 0.999, eps, 0.0, 1, p.data(), g.data(), m.data(), v.data(), false);
  CHECK(p[3] == doctest::Approx(3.0 - lr * 1e-9 / 1.1e-8).epsilon(1e-12));
  CHECK(p[0] == doctest::Approx(1.0 - lr).epsilon(1e-7));  // |g| >> eps: a full lr step
  CHECK_THROWS_AS(
      host::adam_step<double>(q, 4, lr, 0.9, 0.999, eps, 0.0, 0, p.data(), g.data(), m.data(), v.data(), false),
      std::invalid_argument);
}

// ===========================================================================
// Determinism across thread counts for the non-GEMM kernels
// ===========================================================================

TEST_CASE("host kernels: column reductions and scatter-adds are bit-identical across thread counts") {
  const std::size_t R = 3000, C = 700, V = 50;
  const auto dy = as<float>(rand_d(R * C, 1100));
  const auto x = as<float>(rand_d(R * C, 1101));
  const auto ids = rand_labels(R, V, 1102);
  std::vector<float> g(C, 1.0f), mean(R), rstd(R), y(R * C);
  std::vector<std::vector<float>> results;
  for (unsigned threads : {1u, 2u, 3u}) {
    host::queue q(threads);
    std::vector<float> db(C), dx(R * C), dg(C), dbeta(C), dtab(V * C);
    host::bias_grad<float>(q, R, C, dy.data(), db.data(), false);
    host::layernorm_forward<float>(q, R, C, x.data(), g.data(), nullptr, 1e-5, y.data(), mean.data(), rstd.data());
    host::layernorm_backward<float>(q, R, C, x.data(), g.data(), mean.data(), rstd.data(), dy.data(), dx.data(),
                                    dg.data(), dbeta.data(), false);
    host::embedding_backward<float>(q, R, C, ids.data(), dy.data(), 0, V, dtab.data(), false);
    std::vector<float> all;
    for (auto* v : {&db, &dx, &dg, &dbeta, &dtab, &y}) all.insert(all.end(), v->begin(), v->end());
    results.push_back(std::move(all));
  }
  for (std::size_t k = 1; k < results.size(); ++k)
    CHECK(std::memcmp(results[0].data(), results[k].data(), results[0].size() * sizeof(float)) == 0);
}
