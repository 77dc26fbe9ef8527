#pragma once
// Kernel suite, optimizer family: SGD with momentum, Adam and AdamW (PyTorch's
// update rules) over several steps against float64 loops, and closed-form first steps.
#include <stdexcept>

#include "kernel_suite_common.hpp"

namespace kernel_suite {

constexpr std::size_t kOptimizerSizes[] = {1, 5, 16385, 70001, 100003};  // one element to several blocks

TEST_CASE_TEMPLATE("kernels: sgd_momentum_step follows PyTorch over several steps", T, float, double) {
  queue_t q;
  rng g(900);
  const double lr = 0.05;
  for (std::size_t n : kOptimizerSizes)
    for (double momentum : {0.0, 0.9})
      for (double wd : {0.0, 0.01}) {
        const std::string what =
            "n=" + std::to_string(n) + " momentum " + std::to_string(momentum) + " wd " + std::to_string(wd);
        const auto p0 = g.uniform<T>(n);
        std::vector<double> p = widen(p0), v(n, 0.0);
        auto dp = to_dev(q, p0), dv = to_dev(q, std::vector<T>(n, T(0)));
        for (int step = 0; step < 4; ++step) {
          const auto grad = g.uniform<T>(n);
          auto dg = to_dev(q, grad);
          sgd_momentum_step(q, n, lr, momentum, wd, dp.data(), static_cast<const T*>(dg.data()),
                            momentum != 0 ? dv.data() : nullptr);
          for (std::size_t i = 0; i < n; ++i) {
            double gi = to_d(grad[i]) + wd * p[i];
            if (momentum != 0) gi = v[i] = momentum * v[i] + gi;
            p[i] -= lr * gi;
          }
        }
        check_close(to_host(q, dp.data(), n), p, tol<T>, "param " + what);
        // A velocity sums gradients of both signs: it may cancel to near 0.
        if (momentum != 0) check_near(to_host(q, dv.data(), n), v, tol<T>, tol<T>, "velocity " + what);
      }
}

TEST_CASE("kernels: SGD's first step equals the closed form") {
  queue_t q;
  auto p = to_dev(q, std::vector<double>{1.0, -2.0, 0.5}), g = to_dev(q, std::vector<double>{0.1, 0.2, -0.3});
  auto v = to_dev(q, std::vector<double>(3, 0.0));
  sgd_momentum_step(q, 3, 0.1, 0.9, 0.01, p.data(), static_cast<const double*>(g.data()), v.data());
  // v = g + wd p, p = p - lr v.
  const auto ph = to_host(q, p.data(), 3), vh = to_host(q, v.data(), 3);
  CHECK(vh[0] == doctest::Approx(0.1 + 0.01 * 1.0).epsilon(1e-15));
  CHECK(ph[0] == doctest::Approx(1.0 - 0.1 * 0.11).epsilon(1e-15));
  CHECK(ph[1] == doctest::Approx(-2.0 - 0.1 * (0.2 - 0.02)).epsilon(1e-15));
  CHECK(ph[2] == doctest::Approx(0.5 - 0.1 * (-0.3 + 0.005)).epsilon(1e-15));
}

TEST_CASE_TEMPLATE("kernels: adam_step (Adam and AdamW) follows PyTorch over several steps", T, float, double) {
  queue_t q;
  rng g(1000);
  const double lr = 1e-3, b2 = 0.999, eps = 1e-8;
  for (std::size_t n : kOptimizerSizes)
    for (bool decoupled : {false, true})
      for (double wd : {0.0, 0.05, 0.1})
        for (double b1 : {0.9, 0.3}) {  // torch.lerp's two formulas
          const std::string what = "n=" + std::to_string(n) + (decoupled ? " AdamW" : " Adam") + " wd " +
                                   std::to_string(wd) + " beta1 " + std::to_string(b1);
          const auto p0 = g.uniform<T>(n);
          std::vector<double> p = widen(p0), m(n, 0.0), v(n, 0.0);
          auto dp = to_dev(q, p0), dm = to_dev(q, std::vector<T>(n, T(0))), dv = to_dev(q, std::vector<T>(n, T(0)));
          for (std::int64_t step = 1; step <= 5; ++step) {
            const auto grad = g.uniform<T>(n);
            auto dg = to_dev(q, grad);
            adam_step(q, n, lr, b1, b2, eps, wd, step, dp.data(), static_cast<const T*>(dg.data()), dm.data(),
                      dv.data(), decoupled);
            const double bc1 = 1 - std::pow(b1, double(step)), bc2 = 1 - std::pow(b2, double(step));
            for (std::size_t i = 0; i < n; ++i) {
              double gi = to_d(grad[i]);
              if (decoupled)
                p[i] *= 1 - lr * wd;
              else
                gi += wd * p[i];
              m[i] = b1 * m[i] + (1 - b1) * gi;
              v[i] = b2 * v[i] + (1 - b2) * gi * gi;
              p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + eps);
            }
          }
          check_close(to_host(q, dp.data(), n), p, tol<T>, "param " + what);
          check_near(to_host(q, dm.data(), n), m, tol<T>, tol<T>, "m " + what);  // may cancel to near 0
          check_close(to_host(q, dv.data(), n), v, tol<T>, "v " + what);
        }
}

TEST_CASE("kernels: Adam's first step moves each parameter by lr g / (|g| + eps)") {
  queue_t q;
  const double lr = 0.01, eps = 1e-8;
  const std::vector<double> p0 = {1.0, -2.0, 0.25, 3.0}, g = {0.5, -1e-3, 2.0, 1e-9};
  auto dg = to_dev(q, g);
  const auto* grad = static_cast<const double*>(dg.data());
  auto first_step = [&](bool decoupled, double wd) {
    auto p = to_dev(q, p0), m = to_dev(q, std::vector<double>(4, 0.0)), v = to_dev(q, std::vector<double>(4, 0.0));
    adam_step(q, 4, lr, 0.9, 0.999, eps, wd, 1, p.data(), grad, m.data(), v.data(), decoupled);
    return to_host(q, p.data(), 4);
  };
  for (bool decoupled : {false, true})
    for (double wd : {0.0, 0.1}) {
      const auto p = first_step(decoupled, wd);
      for (std::size_t i = 0; i < 4; ++i) {
        // Bias correction makes m_hat = g', v_hat = g'^2 after one step.
        const double ge = decoupled ? g[i] : g[i] + wd * p0[i];
        const double base = decoupled ? p0[i] * (1 - lr * wd) : p0[i];
        CHECK(p[i] == doctest::Approx(base - lr * ge / (std::abs(ge) + eps)).epsilon(1e-12));
      }
    }
  // The 1e-9 gradient (below eps scale) moves its parameter by ~lr/11, not lr.
  const auto p = first_step(false, 0.0);
  CHECK(p[3] == doctest::Approx(3.0 - lr * 1e-9 / 1.1e-8).epsilon(1e-12));
  CHECK(p[0] == doctest::Approx(1.0 - lr).epsilon(1e-7));  // |g| >> eps: a full lr step
  // Steps count from 1: refused before anything is read or written.
  CHECK_THROWS_AS(adam_step(q, 4, lr, 0.9, 0.999, eps, 0.0, 0, static_cast<double*>(nullptr), grad,
                            static_cast<double*>(nullptr), static_cast<double*>(nullptr), false),
                  std::invalid_argument);
}

}  // namespace kernel_suite
