// Every built-in layer's backward, as the executor runs it, against central finite
// differences of its forward, in float64: d(Σ w·y)/dx and d(Σ w·y)/dθ for random w; and
// Dropout's mask (core/random.hpp): its statistics and its global coordinates, and the
// attention's dropout on its probabilities.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <type_traits>
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
    c.in_shape = d.in;
    c.out_shape = d.out;
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

// Checks dx and every parameter gradient of layer L on `rows` × in_shape inputs; returns
// the worst relative error. `prepare` fills what else the contexts of the forwards and
// the backward need.
template <class L>
double check_layer(shape_t in, std::size_t rows, std::vector<double> x, exec::loss_io<double>* loss = nullptr,
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
  double worst = 0;
  if (check_dx) {
    std::vector<double> num(nx);
    for (std::size_t i = 0; i < nx; ++i) num[i] = fd(x[i]);
    worst = rel_err(dx, num);
    CHECK(worst < 1e-6);
  }
  for (std::size_t k = 0; k < params.size(); ++k) {
    std::vector<double> num(params[k].size());
    for (std::size_t i = 0; i < num.size(); ++i) num[i] = fd(params[k][i]);
    INFO("parameter " << k << " of " << desc.name);
    const double e = rel_err(grads[k], num);
    CHECK(e < 1e-6);
    worst = std::max(worst, e);
  }
  return worst;
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

TEST_CASE("SegmentEmbedding: both tables' gradients; the forward against word[id] + segment[type]") {
  // two sequences of 5 ids, separator 9: types 0 0 0 1 1 and 0 1 1 2 2 (Types 3: the last
  // separator would open a fourth segment: capped)
  const std::vector<double> ids = {0, 3, 9, 3, 9, 9, 1, 9, 9, 2};
  check_layer<layers::SegmentEmbedding<10, 4, 3, 9>>(shape_v<5>, 2, ids, nullptr, /*check_dx=*/false);
  harness h;
  using L = layers::SegmentEmbedding<10, 4, 3, 9>;
  layer_call<L> call(shape_v<5>, 2);
  std::vector<std::vector<double>> params{h.rand(40), h.rand(12)}, grads{std::vector<double>(40), std::vector<double>(12)};
  ctx_t c = call.context(h, params, grads);
  std::vector<double> y(10 * 4);
  c.x = ids.data();
  c.y = y.data();
  L::forward(c);
  const int type[10] = {0, 0, 0, 1, 1, 0, 1, 1, 2, 2};
  for (std::size_t t = 0; t < 10; ++t)
    for (std::size_t j = 0; j < 4; ++j)
      CHECK_MESSAGE(y[t * 4 + j] == params[0][std::size_t(ids[t]) * 4 + j] + params[1][std::size_t(type[t]) * 4 + j], t);
}

TEST_CASE("TiedHead with and without its own bias (BERT's decoder has one)") {
  harness h;
  check_layer<layers::TiedHead<7, 4>>(shape_v<4>, 3, h.rand(3 * 4));
  check_layer<layers::TiedHead<7, 4, true>>(shape_v<4>, 3, h.rand(3 * 4));
}

TEST_CASE("SoftmaxCrossEntropy: rows labelled ignore_label have no loss and no gradient") {
  harness h;
  std::vector<std::int32_t> labels = {2, strata::ignore_label, 4, strata::ignore_label, 1};
  exec::loss_io<double> lio;
  lio.labels = labels.data();
  lio.scale = 1.0 / 3;
  check_layer<layers::SoftmaxCrossEntropy>(shape_v<5>, 5, h.rand(5 * 5, 2.0), &lio);
  // the books count the three labelled rows only
  layer_call<layers::SoftmaxCrossEntropy> call(shape_v<5>, 5);
  std::vector<std::vector<double>> none;
  ctx_t c = call.context(h, none, none);
  const auto x = h.rand(25);
  std::vector<double> dx(25, 1.0);
  double acc[3] = {0, 0, 0};
  lio.acc = acc;
  c.loss = &lio;
  c.x = x.data();
  layers::SoftmaxCrossEntropy::forward(c);
  CHECK(acc[2] == 3.0);
  c.dx = dx.data();
  layers::SoftmaxCrossEntropy::backward(c);
  for (std::size_t j = 0; j < 5; ++j) CHECK(dx[5 + j] == 0.0);
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

namespace {
// Grouped-query attention written out in float64 from the documented parameter layout (the
// one a Hugging Face export reads): per token qkv = x·w_qkv (+ b_qkv), whose columns for kv
// group g are its G query heads g·G … g·G+G−1, then k_g, then v_g, dh each; rotary
// positions on q and k (pair (i, i + dh/2) by pos·base^(−2i/dh)); softmax(q·k/√dh) v per
// query head with its group's k and v; the context rows in head order, ·w_out (+ b_out).
// `drop` (sequence, head, query, key): the factor of each probability (attention dropout).
using attention_drop = std::function<double(std::size_t, std::size_t, std::size_t, std::size_t)>;
template <class L>
std::vector<double> ref_attention(const std::vector<double>& x, std::size_t seqs,
                                  const std::vector<std::vector<double>>& p, const attention_drop& drop = {}) {
  constexpr std::size_t D = L::features, S = L::seq, H = L::heads, KV = L::kv_heads, G = H / KV, dh = D / H;
  constexpr std::size_t W = (H + 2 * KV) * dh;
  const std::vector<double>& w_out = p[L::has_bias ? 2 : 1];
  std::vector<double> y(seqs * S * D);
  for (std::size_t sq = 0; sq < seqs; ++sq) {
    std::vector<double> qkv(S * W), ctx(S * D);
    for (std::size_t t = 0; t < S; ++t)
      for (std::size_t c = 0; c < W; ++c) {
        double a = L::has_bias ? p[1][c] : 0.0;
        for (std::size_t i = 0; i < D; ++i) a += x[(sq * S + t) * D + i] * p[0][i * W + c];
        qkv[t * W + c] = a;
      }
    auto at = [&](std::size_t t, std::size_t col0, std::size_t i) {  // a head's element i at token t, rotated
      const double* h = &qkv[t * W + col0];
      if (L::rope_base == 0) return h[i];
      const std::size_t j = i % (dh / 2);
      const double th = double(t) * std::pow(double(L::rope_base), -2.0 * double(j) / double(dh));
      return i < dh / 2 ? h[j] * std::cos(th) - h[j + dh / 2] * std::sin(th)
                        : h[j + dh / 2] * std::cos(th) + h[j] * std::sin(th);
    };
    for (std::size_t hd = 0; hd < H; ++hd) {
      const std::size_t g = hd / G, qc = g * (G + 2) * dh + (hd % G) * dh, kc = g * (G + 2) * dh + G * dh, vc = kc + dh;
      for (std::size_t i = 0; i < S; ++i) {
        const std::size_t n = L::causal ? i + 1 : S;
        std::vector<double> e(n);
        double m = -INFINITY, sum = 0;
        for (std::size_t j = 0; j < n; ++j) {
          double d = 0;
          for (std::size_t k = 0; k < dh; ++k) d += at(i, qc, k) * at(j, kc, k);
          e[j] = d / std::sqrt(double(dh));
          m = std::max(m, e[j]);
        }
        for (std::size_t j = 0; j < n; ++j) sum += (e[j] = std::exp(e[j] - m));
        for (std::size_t j = 0; j < n; ++j)
          for (std::size_t k = 0; k < dh; ++k)
            ctx[i * D + hd * dh + k] += (drop ? drop(sq, hd, i, j) : 1.0) * e[j] / sum * qkv[j * W + vc + k];
      }
    }
    for (std::size_t t = 0; t < S; ++t)
      for (std::size_t o = 0; o < D; ++o) {
        double a = L::has_bias ? p[3][o] : 0.0;
        for (std::size_t i = 0; i < D; ++i) a += ctx[t * D + i] * w_out[i * D + o];
        y[(sq * S + t) * D + o] = a;
      }
  }
  return y;
}

// Layer L's forward on `seqs` random sequences against ref_attention; the worst difference.
template <class L>
double attention_forward_error(harness& h, std::size_t seqs, void (*prepare)(ctx_t&) = nullptr,
                               const attention_drop& drop = {}) {
  const layer_desc desc = describe<L>();
  layer_call<L> call(L::in_shape, seqs * L::seq);
  std::vector<std::vector<double>> params, grads;
  for (int k = 0; k < desc.num_params; ++k) {
    const auto n = static_cast<std::size_t>(desc.params[static_cast<std::size_t>(k)].shape.numel());
    params.push_back(h.rand(n, 0.5));
    grads.emplace_back(n, 0.0);
  }
  const std::vector<double> x = h.rand(seqs * L::seq * L::features);
  std::vector<double> y(x.size());
  ctx_t c = call.context(h, params, grads);
  if (prepare) prepare(c);
  c.x = x.data();
  c.y = y.data();
  L::forward(c);
  const std::vector<double> want = ref_attention<L>(x, seqs, params, drop);
  double worst = 0;
  for (std::size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::abs(y[i] - want[i]));
  return worst;
}
}  // namespace

TEST_CASE("grouped-query attention's forward against its parameter layout written out") {
  harness h;
  using layers::MultiHeadAttention;
  double worst = 0;
  for (double e : {attention_forward_error<MultiHeadAttention<12, 6, 5, false, 0, 2>>(h, 2),
                   attention_forward_error<MultiHeadAttention<12, 6, 5, true, 0, 3, false>>(h, 2),
                   attention_forward_error<MultiHeadAttention<12, 3, 5, true, 100>>(h, 2),  // KVHeads == Heads
                   attention_forward_error<layers::LlamaAttention<16, 4, 2, 7>>(h, 3),
                   attention_forward_error<layers::LlamaAttention<16, 4, 1, 7, 500000>>(h, 1)})
    worst = std::max(worst, e);
  MESSAGE("grouped-query attention forward: worst difference from the written-out layout " << worst);
  CHECK(worst < 1e-12);
}

TEST_CASE("grouped-query and multi-query attention, with and without biases") {
  // D 12, 6 heads of 2: 3 kv heads (groups of 2), 2 (groups of 3), 1 (multi-query); the
  // backward sums each kv head's dk, dv over its group
  harness h;
  using layers::MultiHeadAttention;
  double worst = 0;
  auto run = [&](double e) { worst = std::max(worst, e); };
  run(check_layer<MultiHeadAttention<12, 6, 4, false, 0, 3>>(shape_v<4, 12>, 2 * 4, h.rand(2 * 4 * 12)));
  run(check_layer<MultiHeadAttention<12, 6, 4, true, 0, 2>>(shape_v<4, 12>, 2 * 4, h.rand(2 * 4 * 12)));
  run(check_layer<MultiHeadAttention<12, 6, 4, true, 0, 1>>(shape_v<4, 12>, 2 * 4, h.rand(2 * 4 * 12)));
  run(check_layer<MultiHeadAttention<12, 6, 4, false, 0, 1, false>>(shape_v<4, 12>, 2 * 4, h.rand(2 * 4 * 12)));
  run(check_layer<MultiHeadAttention<12, 6, 4, false, 0, 6, false>>(shape_v<4, 12>, 2 * 4, h.rand(2 * 4 * 12)));
  // rotary positions on q (6 heads) and k (kv heads), causal and not
  run(check_layer<MultiHeadAttention<16, 4, 5, false, 100, 2>>(shape_v<5, 16>, 2 * 5, h.rand(2 * 5 * 16)));
  run(check_layer<MultiHeadAttention<16, 4, 5, true, 100, 1, true>>(shape_v<5, 16>, 2 * 5, h.rand(2 * 5 * 16)));
  run(check_layer<layers::LlamaAttention<16, 4, 2, 5>>(shape_v<5, 16>, 2 * 5, h.rand(2 * 5 * 16)));
  run(check_layer<layers::LlamaAttention<16, 4, 1, 5, 500000>>(shape_v<5, 16>, 2 * 5, h.rand(2 * 5 * 16)));
  MESSAGE("grouped-query attention: worst relative error against finite differences " << worst);
  // zero-bubble halves: backward_data (dx, the QKV rows' gradient kept in weight_keep values)
  // then backward_weights give backward's gradients
  using L = layers::LlamaAttention<16, 4, 2, 5>;
  const std::size_t rows = 2 * 5;
  std::vector<std::vector<double>> params{h.rand(16 * 32, 0.5), h.rand(16 * 16, 0.5)};
  const std::vector<double> x = h.rand(rows * 16), dy = h.rand(rows * 16);
  auto grads_of = [&](bool halves) {
    layer_call<L> call(shape_v<5, 16>, rows);
    std::vector<std::vector<double>> g{std::vector<double>(16 * 32), std::vector<double>(16 * 16)};
    std::vector<double> y(rows * 16), dx(rows * 16), keep(static_cast<std::size_t>(call.m.weight_keep));
    ctx_t c = call.context(h, params, g);
    c.x = x.data();
    c.y = y.data();
    L::forward(c);
    c.dy = dy.data();
    c.dx = dx.data();
    c.keep = keep.data();
    if (halves) {
      L::backward_data(c);
      L::backward_weights(c);
    } else {
      L::backward(c);
    }
    g.push_back(dx);
    return g;
  };
  CHECK(grads_of(true) == grads_of(false));
  // the layout: with KVHeads == Heads and biases, exactly MultiHeadAttention's
  static_assert(std::is_same_v<layers::MultiHeadAttention<12, 6, 4, true, 0, 6, true>,
                               layers::CausalSelfAttention<12, 6, 4>>);
  static_assert(layers::LlamaAttention<16, 4, 2, 5>::params.size() == 2);
  static_assert(layers::LlamaAttention<16, 4, 2, 5>::params[0].shape == shape_v<16, (4 + 2 * 2) * 4>);
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

namespace {
// A training call of an attention layer over sequences of S tokens (the step's key and
// site of training_call; the first sample 10).
template <int S>
void attention_training(ctx_t& c) {
  training_call(c);
  c.sample_rows = S;
}
}  // namespace

TEST_CASE("attention dropout: the backward by finite differences, the mask at global coordinates") {
  harness h;
  using layers::MultiHeadAttention;
  // a fixed training forward (the mask a function of the coordinates): causal and not,
  // grouped-query (groups of 2 and 3), rotary
  double worst = 0;
  auto run = [&](double e) { worst = std::max(worst, e); };
  run(check_layer<layers::CausalSelfAttention<8, 2, 5, 0, 30>>(shape_v<5, 8>, 2 * 5, h.rand(2 * 5 * 8), nullptr, true,
                                                               &attention_training<5>));
  run(check_layer<MultiHeadAttention<12, 6, 4, false, 0, 3, true, 20>>(shape_v<4, 12>, 2 * 4, h.rand(2 * 4 * 12),
                                                                        nullptr, true, &attention_training<4>));
  run(check_layer<layers::LlamaAttention<12, 6, 2, 5, 10000, 30>>(shape_v<5, 12>, 2 * 5, h.rand(2 * 5 * 12), nullptr,
                                                                   true, &attention_training<5>));
  MESSAGE("attention dropout: worst relative error against finite differences " << worst);
  // the forward against the written-out attention whose probability (sequence sq, query
  // head hd, query i, key j) is kept as dropout_keep says at sample 10 + sq, position i,
  // feature hd·Seq + j (hd a query head: in GQA, not its kv head)
  auto mask = [](int percent, std::size_t seq) {
    return [percent, seq](std::size_t sq, std::size_t hd, std::size_t i, std::size_t j) {
      const bool keep = dropout_keep(5, 3, 4, 10 + sq, i, hd * seq + j, dropout_threshold(std::uint64_t(percent), 100));
      return keep ? 100.0 / (100 - percent) : 0.0;
    };
  };
  using Gqa = MultiHeadAttention<12, 6, 5, true, 0, 2, false, 25>;
  const double e_gqa = attention_forward_error<Gqa>(h, 3, &attention_training<5>, mask(25, 5));
  const double e_mha = attention_forward_error<layers::CausalSelfAttention<12, 3, 7, 0, 10>>(
      h, 2, &attention_training<7>, mask(10, 7));
  MESSAGE("attention dropout forward: worst difference from the written-out mask " << std::max(e_gqa, e_mha));
  CHECK(std::max(e_gqa, e_mha) < 1e-12);
  // it drops: not the undropped attention; evaluation (training false) is exactly it
  CHECK(attention_forward_error<Gqa>(h, 3, &attention_training<5>) > 1e-3);
  CHECK(attention_forward_error<Gqa>(h, 3, [](ctx_t& c) { attention_training<5>(c), c.training = false; }) < 1e-12);
  static_assert(layers::CausalSelfAttention<8, 2, 5, 0, 30>::attention_dropout == 0.3);
}

// ---- image layers (NHWC) -------------------------------------------------------------------

namespace {

// Runs L's forward on `samples` images of shape `in` with the given parameters.
template <class L>
std::vector<double> run_forward(shape_t in, std::size_t samples, const std::vector<double>& x,
                                std::vector<std::vector<double>> params) {
  harness h;
  const std::size_t rows = samples * static_cast<std::size_t>(in.rows());
  layer_call<L> call(in, rows);
  std::vector<std::vector<double>> grads;
  for (auto& p : params) grads.emplace_back(p.size(), 0.0);
  ctx_t c = call.context(h, params, grads);
  std::vector<double> y(static_cast<std::size_t>(call.d.out_rows * call.d.out_cols));
  c.x = x.data();
  c.y = y.data();
  L::forward(c);
  return y;
}

// The convolution written out: y[n, oh, ow, o] = b[o] + Σ W[o, kh, kw, c]·x[n, oh·s − p + kh, ow·s − p + kw, c].
std::vector<double> direct_conv(int N, int H, int W, int C, int O, int K, int s, int p, const std::vector<double>& x,
                                const std::vector<double>& w, const std::vector<double>* b) {
  const int OH = (H + 2 * p - K) / s + 1, OW = (W + 2 * p - K) / s + 1;
  std::vector<double> y(static_cast<std::size_t>(N * OH * OW * O));
  for (int n = 0; n < N; ++n)
    for (int oh = 0; oh < OH; ++oh)
      for (int ow = 0; ow < OW; ++ow)
        for (int o = 0; o < O; ++o) {
          double acc = b ? (*b)[static_cast<std::size_t>(o)] : 0.0;
          for (int kh = 0; kh < K; ++kh)
            for (int kw = 0; kw < K; ++kw)
              for (int c = 0; c < C; ++c) {
                const int h = oh * s - p + kh, ww = ow * s - p + kw;
                if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                acc += w[static_cast<std::size_t>(((o * K + kh) * K + kw) * C + c)] *
                       x[static_cast<std::size_t>(((n * H + h) * W + ww) * C + c)];
              }
          y[static_cast<std::size_t>(((n * OH + oh) * OW + ow) * O + o)] = acc;
        }
  return y;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

}  // namespace

TEST_CASE("Conv2d: forward against the convolution written out; backward by finite differences") {
  harness h;
  // 3×3, stride 2, padding 1 over [7, 6, 3] (odd and even extents, padding on every border)
  {
    using L = layers::Conv2d<3, 4, 3, 2, 1>;
    static_assert(L::out_shape(shape_v<7, 6, 3>) == shape_v<4, 3, 4>);
    const auto x = h.rand(2 * 7 * 6 * 3), w = h.rand(4 * 9 * 3), b = h.rand(4);
    CHECK(max_abs_diff(run_forward<L>(shape_v<7, 6, 3>, 2, x, {w, b}), direct_conv(2, 7, 6, 3, 4, 3, 2, 1, x, w, &b)) <
          1e-13);
    check_layer<L>(shape_v<7, 6, 3>, 2 * 42, x);
  }
  // 1×1 moved by 1 (reads the input as it is: no im2col), and by 2 without bias (ResNet's projection)
  {
    using L = layers::Conv2d<3, 5, 1>;
    static_assert(L::memory(local_dims{.rows = 8, .out_rows = 8, .in = shape_v<2, 2, 3>}).scratch_values == 0);
    const auto x = h.rand(2 * 4 * 3), w = h.rand(5 * 3), b = h.rand(5);
    CHECK(max_abs_diff(run_forward<L>(shape_v<2, 2, 3>, 2, x, {w, b}), direct_conv(2, 2, 2, 3, 5, 1, 1, 0, x, w, &b)) <
          1e-13);
    check_layer<L>(shape_v<2, 2, 3>, 8, x);
    using P = layers::Conv2d<2, 3, 1, 2, 0, false>;
    const auto xp = h.rand(3 * 5 * 5 * 2), wp = h.rand(3 * 2);
    CHECK(max_abs_diff(run_forward<P>(shape_v<5, 5, 2>, 3, xp, {wp}), direct_conv(3, 5, 5, 2, 3, 1, 2, 0, xp, wp, nullptr)) <
          1e-13);
    check_layer<P>(shape_v<5, 5, 2>, 3 * 25, xp);
  }
  // ResNet's stem shape in miniature: 7×7, stride 2, padding 3
  check_layer<layers::Conv2d<1, 2, 7, 2, 3>>(shape_v<9, 8, 1>, 72, h.rand(72));
}

TEST_CASE("MaxPool2d, AvgPool2d, GlobalAvgPool2d: forward against the windows written out; backward by finite differences") {
  harness h;
  const shape_t in = shape_v<5, 6, 2>;
  const std::size_t N = 2, rows = N * 30;
  const auto x = h.rand(rows * 2);  // distinct values: no ties for the maximum
  // the windows written out, padding excluded from the maximum and counted as zero in the mean
  auto pooled = [&](int K, int s, int p, bool max) {
    const int OH = (5 + 2 * p - K) / s + 1, OW = (6 + 2 * p - K) / s + 1;
    std::vector<double> y;
    for (int n = 0; n < int(N); ++n)
      for (int oh = 0; oh < OH; ++oh)
        for (int ow = 0; ow < OW; ++ow)
          for (int c = 0; c < 2; ++c) {
            double best = -1e300, sum = 0;
            for (int kh = 0; kh < K; ++kh)
              for (int kw = 0; kw < K; ++kw) {
                const int hh = oh * s - p + kh, ww = ow * s - p + kw;
                if (hh < 0 || hh >= 5 || ww < 0 || ww >= 6) continue;
                const double v = x[static_cast<std::size_t>(((n * 5 + hh) * 6 + ww) * 2 + c)];
                best = std::max(best, v);
                sum += v;
              }
            y.push_back(max ? best : sum / (K * K));
          }
    return y;
  };
  CHECK(max_abs_diff(run_forward<layers::MaxPool2d<3, 2, 1>>(in, N, x, {}), pooled(3, 2, 1, true)) == 0.0);
  CHECK(max_abs_diff(run_forward<layers::AvgPool2d<3, 2, 1>>(in, N, x, {}), pooled(3, 2, 1, false)) < 1e-15);
  CHECK(max_abs_diff(run_forward<layers::AvgPool2d<2>>(in, N, x, {}), pooled(2, 2, 0, false)) < 1e-15);
  check_layer<layers::MaxPool2d<3, 2, 1>>(in, rows, x);
  check_layer<layers::MaxPool2d<2>>(in, rows, x);
  check_layer<layers::AvgPool2d<3, 2, 1>>(in, rows, x);
  // global: the mean of each channel over the image
  static_assert(layers::GlobalAvgPool2d::out_shape(shape_v<5, 6, 2>) == shape_v<2>);
  const auto g = run_forward<layers::GlobalAvgPool2d>(in, N, x, {});
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t c = 0; c < 2; ++c) {
      double s = 0;
      for (std::size_t p = 0; p < 30; ++p) s += x[(n * 30 + p) * 2 + c];
      CHECK(std::abs(g[n * 2 + c] - s / 30) < 1e-15);
    }
  check_layer<layers::GlobalAvgPool2d>(in, rows, x);
}

TEST_CASE("BatchNorm2d: forward against float64 statistics of every pixel of every sample; backward by finite differences") {
  harness h;
  const shape_t in = shape_v<3, 4, 5>;
  const std::size_t rows = 2 * 12;
  auto x = h.rand(rows * 5);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] += double(i % 5);  // a mean per channel
  const auto gamma = h.rand(5), beta = h.rand(5);
  const auto y = run_forward<layers::BatchNorm2d<5>>(in, 2, x, {gamma, beta});
  for (std::size_t c = 0; c < 5; ++c) {
    double m = 0, v = 0;
    for (std::size_t r = 0; r < rows; ++r) m += x[r * 5 + c];
    m /= double(rows);
    for (std::size_t r = 0; r < rows; ++r) v += (x[r * 5 + c] - m) * (x[r * 5 + c] - m);
    v /= double(rows);
    for (std::size_t r = 0; r < rows; ++r)
      CHECK(std::abs(y[r * 5 + c] - (gamma[c] * (x[r * 5 + c] - m) / std::sqrt(v + 1e-5) + beta[c])) < 1e-13);
  }
  check_layer<layers::BatchNorm2d<5>>(in, rows, x);
  // over vectors (BatchNorm1d's use): every sample a row
  check_layer<layers::BatchNorm2d<4>>(shape_v<4>, 6, h.rand(6 * 4));
}
