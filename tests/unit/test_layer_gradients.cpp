// Every built-in layer's backward, as the executor runs it, against central finite
// differences of its forward, in float64: d(Σ w·y)/dx and d(Σ w·y)/dθ for random w; and
// Dropout's mask (core/random.hpp): its statistics and its global coordinates.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "central_difference.hpp"
#include <strata/backend/host/backend.hpp>
#include <strata/comm/self.hpp>
#include <strata/exec/context.hpp>
#include <strata/strata.hpp>

using namespace strata;

namespace {

using B = backend::Host;
using ctx_t = exec::layer_ctx<B, double, comm::self_communicator>;

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

// One call of layer L on one device, with the buffers its memory() asks for, as the
// executor makes it (a view runs no kernel: its output is its input).
template <class L>
struct layer_call {
  local_dims d;
  buffer_needs m;
  std::vector<double> stash_values, stash_stats, scratch_values, scratch_stats;
  std::vector<std::int32_t> stash_ids;
  layer_call(shape_t in, std::size_t rows) {
    d.rows = static_cast<long long>(rows);
    d.in_cols = in.last();
    d.in = in;
    d.out = L::out_shape(in);
    const bool loss = L::role == layer_role::loss;
    d.out_rows = loss ? 0 : d.rows * (d.out.numel() / d.out.last()) / (in.numel() / in.last());
    d.out_cols = loss ? 0 : d.out.last();
    m = L::memory(d);
    stash_values.resize(static_cast<std::size_t>(m.stash_values));
    stash_stats.resize(static_cast<std::size_t>(m.stash_stats));
    stash_ids.resize(static_cast<std::size_t>(m.stash_ids));
    scratch_values.resize(static_cast<std::size_t>(m.scratch_values));
    scratch_stats.resize(static_cast<std::size_t>(m.scratch_stats));
  }
  ctx_t context(harness& h, std::vector<std::vector<double>>& params, std::vector<std::vector<double>>& grads) {
    ctx_t c{h.q, h.self};
    c.rows = static_cast<std::size_t>(d.rows);
    c.in_cols = static_cast<std::size_t>(d.in_cols);
    c.out_cols = static_cast<std::size_t>(d.out_cols);
    for (std::size_t k = 0; k < params.size(); ++k) c.w[k] = params[k].data(), c.g[k] = grads[k].data();
    c.stash_values = stash_values.data();
    c.stash_stats = stash_stats.data();
    c.stash_ids = stash_ids.data();
    c.scratch_values = scratch_values.data();
    c.scratch_stats = scratch_stats.data();
    return c;
  }
  static void forward(ctx_t& c) {
    if (L::memory(local_dims{}).view) {
      std::copy(c.x, c.x + c.rows * c.in_cols, c.y);
      return;
    }
    L::forward(c);
  }
  static void backward(ctx_t& c) {
    if (L::memory(local_dims{}).view) {
      if (c.dx) std::copy(c.dy, c.dy + c.rows * c.in_cols, c.dx);
      return;
    }
    L::backward(c);
  }
};

// Checks dx and every parameter gradient of layer L on `rows` × in_shape inputs;
// `prepare` fills what else the contexts of the forwards and the backward need.
template <class L>
void check_layer(shape_t in, std::size_t rows, std::vector<double> x, exec::loss_io<double>* loss = nullptr,
                 bool check_dx = true, void (*prepare)(ctx_t&) = nullptr) {
  harness h;
  const layer_desc desc = describe<L>();
  layer_call<L> call(in, rows);
  const std::size_t nx = rows * static_cast<std::size_t>(in.last());
  const std::size_t ny = static_cast<std::size_t>(call.d.out_rows * call.d.out_cols);
  std::vector<std::vector<double>> params, grads;
  for (int k = 0; k < desc.num_params; ++k) {
    const auto n = static_cast<std::size_t>(desc.params[static_cast<std::size_t>(k)].shape.numel());
    params.push_back(h.rand(n, 0.5));
    grads.emplace_back(n, 0.0);
  }
  const std::vector<double> w = h.rand(std::max<std::size_t>(ny, 1));
  // objective: Σ w·y, or the loss layer's mean loss
  auto objective = [&]() {
    layer_call<L> fresh(in, rows);
    std::vector<std::vector<double>> scratch_grads = grads;
    ctx_t c = fresh.context(h, params, scratch_grads);
    if (prepare) prepare(c);
    std::vector<double> y(std::max<std::size_t>(ny, 1));
    c.x = x.data();
    c.y = y.data();
    exec::loss_io<double> lio = loss ? *loss : exec::loss_io<double>{};
    double acc[3] = {0, 0, 0};  // Σ loss, correct, rows
    lio.acc = acc;
    c.loss = &lio;
    layer_call<L>::forward(c);
    if (loss) return acc[0] * lio.scale;
    double s = 0;
    for (std::size_t i = 0; i < ny; ++i) s += w[i] * y[i];
    return s;
  };
  // analytic gradients
  ctx_t c = call.context(h, params, grads);
  if (prepare) prepare(c);
  std::vector<double> y(std::max<std::size_t>(ny, 1)), dx(nx, 0.0);
  exec::loss_io<double> lio = loss ? *loss : exec::loss_io<double>{};
  double acc[3] = {0, 0, 0};
  lio.acc = acc;
  c.loss = &lio;
  c.x = x.data();
  c.y = y.data();
  layer_call<L>::forward(c);
  c.dy = w.data();
  c.dx = check_dx ? dx.data() : nullptr;
  layer_call<L>::backward(c);

  auto fd = [&](double& v) { return central_difference(v, objective); };
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
    INFO("parameter " << k << " of " << desc.name);
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

TEST_CASE("RMSNorm: gradients, and the forward against its closed form") {
  harness h;
  check_layer<layers::RMSNorm<6>>(shape_v<6>, 4, h.rand(4 * 6));
  check_layer<layers::RMSNorm<5, 6>>(shape_v<5>, 3, h.rand(3 * 5, 1e-3));  // small rows: eps matters
  // y = x / sqrt(mean x^2 + eps) * weight, in float64 by hand
  using L = layers::RMSNorm<7>;
  layer_call<L> call(shape_v<7>, 3);
  std::vector<std::vector<double>> params{h.rand(7)}, grads{std::vector<double>(7)};
  const std::vector<double> x = h.rand(3 * 7);
  std::vector<double> y(3 * 7);
  ctx_t c = call.context(h, params, grads);
  c.x = x.data();
  c.y = y.data();
  L::forward(c);
  for (std::size_t r = 0; r < 3; ++r) {
    double ms = 0;
    for (std::size_t j = 0; j < 7; ++j) ms += x[r * 7 + j] * x[r * 7 + j] / 7;
    for (std::size_t j = 0; j < 7; ++j)
      CHECK(y[r * 7 + j] == doctest::Approx(x[r * 7 + j] / std::sqrt(ms + 1e-5) * params[0][j]).epsilon(1e-14));
  }
  CHECK(L::eps == 1e-5);
  CHECK(layers::RMSNorm<7, 6>::eps == 1e-6);
}

TEST_CASE("SwiGLU: gradients, and the forward against its closed form") {
  harness h;
  check_layer<layers::SwiGLU<5, 7>>(shape_v<5>, 3, h.rand(3 * 5));
  using L = layers::SwiGLU<4, 6>;
  layer_call<L> call(shape_v<4>, 2);
  std::vector<std::vector<double>> params{h.rand(24), h.rand(24), h.rand(24)};
  std::vector<std::vector<double>> grads{std::vector<double>(24), std::vector<double>(24), std::vector<double>(24)};
  const std::vector<double> x = h.rand(2 * 4);
  std::vector<double> y(2 * 4);
  ctx_t c = call.context(h, params, grads);
  c.x = x.data();
  c.y = y.data();
  L::forward(c);
  for (std::size_t r = 0; r < 2; ++r)
    for (std::size_t o = 0; o < 4; ++o) {
      double want = 0;
      for (std::size_t k = 0; k < 6; ++k) {
        double g = 0, u = 0;
        for (std::size_t i = 0; i < 4; ++i) g += x[r * 4 + i] * params[0][i * 6 + k], u += x[r * 4 + i] * params[1][i * 6 + k];
        want += g / (1 + std::exp(-g)) * u * params[2][k * 4 + o];
      }
      CHECK(y[r * 4 + o] == doctest::Approx(want).epsilon(1e-13));
    }
}

TEST_CASE("Embedding (table gradient)") {
  std::vector<double> ids = {0, 3, 3, 9, 1, 7};  // a repeated id accumulates
  check_layer<layers::Embedding<10, 4>>(shape_v<3>, 2, ids, nullptr, /*check_dx=*/false);
}

TEST_CASE("SoftmaxCrossEntropy (mean loss)") {
  harness h;
  std::vector<std::int32_t> labels = {2, 0, 4, 1, 1};
  exec::loss_io<double> lio;
  lio.labels = labels.data();
  lio.scale = 1.0 / 5;
  check_layer<layers::SoftmaxCrossEntropy>(shape_v<5>, 5, h.rand(5 * 5, 2.0), &lio);
}

TEST_CASE("MultiHeadAttention and CausalSelfAttention") {
  // three sequences of 4 tokens, D 6, 2 heads; all of x and every parameter
  harness h;
  check_layer<layers::MultiHeadAttention<6, 2, 4>>(shape_v<4, 6>, 3 * 4, h.rand(3 * 4 * 6));
  check_layer<layers::CausalSelfAttention<6, 2, 4>>(shape_v<4, 6>, 3 * 4, h.rand(3 * 4 * 6));
  check_layer<layers::CausalSelfAttention<8, 4, 3>>(shape_v<3, 8>, 2 * 3, h.rand(2 * 3 * 8, 2.0));
  // rotary positions (Llama): q and k rotated by position, the backward through the rotation
  check_layer<layers::CausalSelfAttention<8, 2, 5, 10000>>(shape_v<5, 8>, 2 * 5, h.rand(2 * 5 * 8));
  check_layer<layers::MultiHeadAttention<8, 2, 4, false, 100>>(shape_v<4, 8>, 3 * 4, h.rand(3 * 4 * 8));
}

TEST_CASE("PositionEmbedding") {
  harness h;
  check_layer<layers::PositionEmbedding<3, 5>>(shape_v<3, 5>, 2 * 3, h.rand(2 * 3 * 5));
}

namespace {
// A training call of a Dropout: the step's key and the call's place in the step.
const std::uint64_t drop_key = dropout_step_key(5, 3);
void training_call(ctx_t& c) {
  c.training = true;
  c.step_key = &drop_key;
  c.site = 4;
  c.sample0 = 10;
  c.sample_rows = 5;
}
// y of one Dropout call on x (rows × cols), the context prepared by `prepare` and then `place`.
template <class L, class Place>
std::vector<double> dropout_forward(const std::vector<double>& x, std::size_t rows, std::size_t cols, bool training,
                                    Place place) {
  harness h;
  layer_call<L> call(shape_t{1, {static_cast<int>(cols), 0, 0, 0}}, rows);
  std::vector<std::vector<double>> none;
  ctx_t c = call.context(h, none, none);
  training_call(c);
  c.training = training;
  place(c);
  std::vector<double> y(rows * cols, std::nan(""));
  c.x = x.data();
  c.y = y.data();
  L::forward(c);
  return y;
}
}  // namespace

TEST_CASE("Dropout: the mask's keep fraction, and its coordinates independent") {
  // the threshold is floor(rate · 2^64), exact for rates a double would round
  CHECK(dropout_threshold(0, 100) == 0);
  CHECK(dropout_threshold(1, 2) == (std::uint64_t(1) << 63));
  CHECK(dropout_threshold(1, 10) == 1844674407370955161ULL);   // 2^64 / 10 = 1844674407370955161.6
  CHECK(dropout_threshold(99, 100) == 18262276632972456099ULL);  // 2^64 · 0.99 = ...6099.84
  CHECK(layers::Dropout<10>::threshold == dropout_threshold(1, 10));
  CHECK(layers::Dropout<5, 1000>::rate == 0.005);
  // keep fraction over 2^20 elements (samples × positions × features) within 5 binomial σ
  constexpr std::uint64_t seed = 0x5eed;
  for (int percent : {1, 10, 50, 90}) {
    const double p = percent / 100.0;
    const std::uint64_t th = dropout_threshold(std::uint64_t(percent), 100);
    long long kept = 0, n = 0;
    for (std::uint64_t sample = 0; sample < 64; ++sample)
      for (std::uint64_t pos = 0; pos < 128; ++pos)
        for (std::uint64_t f = 0; f < 128; ++f, ++n) kept += dropout_keep(seed, 7, 3, sample, pos, f, th);
    const double sigma = std::sqrt(double(n) * p * (1 - p));
    INFO("rate " << p << ": kept " << kept << " of " << n);
    CHECK(std::abs(double(kept) - double(n) * (1 - p)) < 5 * sigma);
  }
  // neighbours along each coordinate are kept together with probability (1−p)², as
  // independent draws are: step, site, sample, position, feature, and the seed
  const double p = 0.5;
  const std::uint64_t th = dropout_threshold(1, 2);
  for (int axis = 0; axis < 6; ++axis) {
    long long both = 0, n = 0;
    for (std::uint64_t a = 0; a < 256; ++a)
      for (std::uint64_t b = 0; b < 256; ++b, ++n) {
        std::array<std::uint64_t, 6> c{1, 2, a, b, (a * 7 + b) % 64, 9};  // seed, step, site, sample, position, feature
        auto keep = [&] {
          return dropout_keep(c[0], c[1], static_cast<int>(c[2]), c[3], c[4], c[5] + (a + b) % 3, th);
        };
        const bool k0 = keep();
        ++c[static_cast<std::size_t>(axis)];
        both += k0 && keep();
      }
    const double q = (1 - p) * (1 - p), sigma = std::sqrt(double(n) * q * (1 - q));
    INFO("axis " << axis << ": both kept " << both << " of " << n);
    CHECK(std::abs(double(both) - double(n) * q) < 5 * sigma);
  }
}

TEST_CASE("Dropout: the backward by finite differences; the mask at global coordinates; evaluation the identity") {
  harness h;
  using L = layers::Dropout<30>;
  check_layer<L>(shape_v<5, 6>, 2 * 5, h.rand(2 * 5 * 6), nullptr, true, &training_call);
  // a training forward: each element kept (× 1/0.7) or dropped as dropout_keep says at its
  // global coordinates: row m = row0 + r is sample sample0 + m / 5 at position m % 5
  const std::size_t rows = 10, cols = 6;
  const std::vector<double> x = h.rand(rows * cols);
  const auto whole = dropout_forward<L>(x, rows, cols, true, [](ctx_t&) {});
  std::size_t dropped = 0;
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t f = 0; f < cols; ++f) {
      const bool keep = dropout_keep(5, 3, 4, 10 + r / 5, r % 5, f, L::threshold);
      dropped += !keep;
      CHECK(whole[r * cols + f] == (keep ? x[r * cols + f] * (100.0 / 70.0) : 0.0));
    }
  CHECK(dropped > 0);
  CHECK(dropped < rows * cols / 2);
  // a device's block (a row split from row 3, a feature split from feature 2) draws the
  // whole tensor's mask on its elements
  std::vector<double> block(4 * 3);
  for (std::size_t r = 0; r < 4; ++r)
    for (std::size_t f = 0; f < 3; ++f) block[r * 3 + f] = x[(3 + r) * cols + 2 + f];
  const auto part = dropout_forward<L>(block, 4, 3, true, [](ctx_t& c) { c.row0 = 3, c.col0 = 2; });
  for (std::size_t r = 0; r < 4; ++r)
    for (std::size_t f = 0; f < 3; ++f) CHECK(part[r * 3 + f] == whole[(3 + r) * cols + 2 + f]);
  // another step (key), site or sample: another mask
  const std::uint64_t other_key = dropout_step_key(5, 4);
  auto differs = [&](auto place) { return dropout_forward<L>(x, rows, cols, true, place) != whole; };
  CHECK(differs([&](ctx_t& c) { c.step_key = &other_key; }));
  CHECK(differs([](ctx_t& c) { c.site = 5; }));
  CHECK(differs([](ctx_t& c) { c.sample0 = 12; }));
  // evaluation: the identity, whatever the key
  CHECK(dropout_forward<L>(x, rows, cols, false, [](ctx_t&) {}) == x);
  // Dropout<0> is a view: no kernel, no buffer
  CHECK(layers::Dropout<0>::memory(local_dims{}).view);
  CHECK(!L::memory(local_dims{}).view);
}
