// Every built-in layer's backward, as the executor runs it, against central finite
// differences of its forward, in float64: d(Σ w·y)/dx and d(Σ w·y)/dθ for random w.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include <strata/comm/communicator.hpp>
#include <strata/runtime/layer_exec.hpp>
#include <strata/strata.hpp>

using namespace strata;
using runtime::exec;

namespace {

using B = backend::Host;
using buffer = B::buffer<double>;

template <class L>
layer_plan plan_of(shape_t in) {
  layer_plan lp;
  lp.desc = describe<L>();
  lp.in = in;
  lp.out = L::out_shape(in);
  for (int k = 0; k < lp.desc.num_params; ++k) lp.local_params[static_cast<std::size_t>(k)] = L::params[static_cast<std::size_t>(k)].shape;
  return lp;
}

struct harness {
  B::queue q{1};
  comm::self_communicator self{};
  std::mt19937_64 g{42};
  std::normal_distribution<double> nd{};
  std::vector<double> rand(std::size_t n, double scale = 1.0) {
    std::vector<double> v(n);
    for (auto& x : v) x = scale * nd(g);
    return v;
  }
};

// Checks dx and every parameter gradient of layer L on `rows` × in_shape inputs.
template <class L>
void check_layer(shape_t in, std::size_t rows, std::vector<double> x, runtime::loss_io<double>* loss = nullptr,
                 bool check_dx = true) {
  harness h;
  const layer_plan lp = plan_of<L>(in);
  const std::size_t in_cols = static_cast<std::size_t>(in.last());
  const std::size_t out_rows = rows * static_cast<std::size_t>(lp.out.numel() / lp.out.last()) /
                               static_cast<std::size_t>(in.numel() / in.last());
  const std::size_t out_cols = lp.desc.role == layer_role::loss ? 1 : static_cast<std::size_t>(lp.out.last());
  const std::size_t nx = rows * in_cols, ny = out_rows * out_cols;
  std::vector<std::vector<double>> params, grads;
  for (int k = 0; k < lp.desc.num_params; ++k) {
    const auto n = static_cast<std::size_t>(lp.desc.params[static_cast<std::size_t>(k)].shape.numel());
    params.push_back(h.rand(n, 0.5));
    grads.emplace_back(n, 0.0);
  }
  const std::vector<double> w = h.rand(std::max<std::size_t>(ny, 1));
  auto make_io = [&](runtime::step_io<B, double>& io) {
    for (auto& p : params) io.params.push_back(p.data());
    for (auto& gr : grads) io.grads.push_back(gr.data());
  };
  // objective: Σ w·y, or the loss layer's mean loss
  auto objective = [&]() {
    runtime::step_io<B, double> io{h.q, lp, rows, in_cols, out_cols, 0, 1, {}, {}};
    make_io(io);
    runtime::stash<B, double> st;
    std::vector<double> y(std::max<std::size_t>(ny, 1));
    if (loss) {
      runtime::loss_io<double> lio = *loss;
      double acc[3] = {0, 0, 0};  // Σ loss, correct, rows
      lio.acc = acc;
      exec<L>::forward(io, st, x.data(), y.data(), h.self, &lio);
      return acc[0] * lio.scale;
    }
    exec<L>::forward(io, st, x.data(), y.data(), h.self, static_cast<runtime::loss_io<double>*>(nullptr));
    double s = 0;
    for (std::size_t i = 0; i < ny; ++i) s += w[i] * y[i];
    return s;
  };
  // analytic gradients
  runtime::step_io<B, double> io{h.q, lp, rows, in_cols, out_cols, 0, 1, {}, {}};
  make_io(io);
  runtime::stash<B, double> st;
  std::vector<double> y(std::max<std::size_t>(ny, 1)), dx(nx, 0.0);
  runtime::loss_io<double> lio = loss ? *loss : runtime::loss_io<double>{};
  double acc[3] = {0, 0, 0};
  lio.acc = acc;
  exec<L>::forward(io, st, x.data(), y.data(), h.self, loss ? &lio : nullptr);
  exec<L>::backward(io, st, w.data(), check_dx ? dx.data() : nullptr, h.self, loss ? &lio : nullptr);

  const double eps = 1e-6;
  auto fd = [&](double& v) {
    const double keep = v;
    v = keep + eps;
    const double up = objective();
    v = keep - eps;
    const double down = objective();
    v = keep;
    return (up - down) / (2 * eps);
  };
  auto rel_err = [](const std::vector<double>& a, const std::vector<double>& b) {
    double num = 0, den = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      num += (a[i] - b[i]) * (a[i] - b[i]);
      den += b[i] * b[i];
    }
    return std::sqrt(num / std::max(den, 1e-300));
  };
  if (check_dx) {
    std::vector<double> num(nx);
    for (std::size_t i = 0; i < nx; ++i) num[i] = fd(x[i]);
    CHECK(rel_err(dx, num) < 1e-6);
  }
  for (std::size_t k = 0; k < params.size(); ++k) {
    std::vector<double> num(params[k].size());
    for (std::size_t i = 0; i < num.size(); ++i) num[i] = fd(params[k][i]);
    INFO("parameter " << k << " of " << lp.desc.name);
    CHECK(rel_err(grads[k], num) < 1e-6);
  }
}

}  // namespace

TEST_CASE("Linear (with and without bias)") {
  harness h;
  check_layer<layers::Linear<7, 5>>(shape_v<7>, 6, h.rand(6 * 7));
  check_layer<layers::Linear<4, 9, false>>(shape_v<4>, 3, h.rand(3 * 4));
  // on sequences: [3, 7] per sample, rows = samples × 3
  check_layer<layers::Linear<7, 2>>(shape_v<3, 7>, 6, h.rand(6 * 7));
}

TEST_CASE("ReLU, GeLU, Flatten") {
  harness h;
  auto x = h.rand(5 * 8);
  for (auto& v : x)
    if (std::abs(v) < 1e-3) v = 0.5;  // keep ReLU's kink away from the finite-difference step
  check_layer<layers::ReLU>(shape_v<8>, 5, x);
  check_layer<layers::GeLU>(shape_v<8>, 5, h.rand(5 * 8));
  check_layer<layers::Flatten>(shape_v<2, 3, 4>, 2 * 2 * 3, h.rand(2 * 24));
}

TEST_CASE("LayerNorm") {
  harness h;
  check_layer<layers::LayerNorm<6>>(shape_v<6>, 4, h.rand(4 * 6));
}

TEST_CASE("Embedding (table gradient)") {
  std::vector<double> ids = {0, 3, 3, 9, 1, 7};  // a repeated id accumulates
  check_layer<layers::Embedding<10, 4>>(shape_v<3>, 2, ids, nullptr, /*check_dx=*/false);
}

TEST_CASE("SoftmaxCrossEntropy (mean loss)") {
  harness h;
  std::vector<std::int32_t> labels = {2, 0, 4, 1, 1};
  runtime::loss_io<double> lio;
  lio.labels = labels.data();
  lio.scale = 1.0 / 5;
  check_layer<layers::SoftmaxCrossEntropy>(shape_v<5>, 5, h.rand(5 * 5, 2.0), &lio);
}
