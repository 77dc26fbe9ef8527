// The MoE layer in float64 on the host backend: its forward (output and load-balancing
// loss) against a plain-loop reference written here, with and without dropped tokens;
// its backward (x, gate, w_in, w_out, the router through the combine weights and the
// auxiliary loss) against central finite differences; and through the trainer, the
// step's loss and gradient (cross-entropy + aux per micro-batch) against finite
// differences of the reported loss, and a small GPT with an MoE block that learns.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "central_difference.hpp"
#include <strata/backend/host/backend.hpp>
#include <strata/comm/self.hpp>
#include <strata/exec/context.hpp>
#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

using namespace strata;

namespace {

using B = backend::Host;
using ctx_t = exec::layer_ctx<B, double, comm::self_communicator>;
using vec = std::vector<double>;

std::mt19937_64 rng{7};
vec randn(std::size_t n, double scale = 1.0) {
  std::normal_distribution<double> nd;
  vec v(n);
  for (auto& x : v) x = scale * nd(rng);
  return v;
}

// ---- the reference: plain loops, nothing from the library ------------------------------
struct ref_out {
  vec y;
  double aux = 0;
  int dropped = 0;
};
double gelu_ref(double v) { return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))); }

ref_out moe_reference(int E, int D, int H, int K, int cap_percent, double alpha, std::size_t R, const vec& x,
                      const vec& gate, const vec& w_in, const vec& w_out) {
  ref_out o;
  o.y.assign(R * D, 0.0);
  std::vector<vec> p(R, vec(E));
  std::vector<std::vector<int>> pick(R);
  for (std::size_t r = 0; r < R; ++r) {
    double mx = -1e300, s = 0;
    for (int e = 0; e < E; ++e) {
      double l = 0;
      for (int d = 0; d < D; ++d) l += x[r * D + d] * gate[d * E + e];
      p[r][e] = l;
      mx = std::max(mx, l);
    }
    for (int e = 0; e < E; ++e) s += (p[r][e] = std::exp(p[r][e] - mx));
    for (int e = 0; e < E; ++e) p[r][e] /= s;
    std::vector<int> order(E);
    for (int e = 0; e < E; ++e) order[e] = e;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[r][a] > p[r][b]; });
    pick[r].assign(order.begin(), order.begin() + K);
  }
  const long long want = (static_cast<long long>(cap_percent) * R * K + 100LL * E - 1) / (100LL * E);
  const long long cap = std::min<long long>(std::max<long long>(want, 1), static_cast<long long>(R));
  std::vector<long long> used(E, 0), picked(E, 0);
  for (int j = 0; j < K; ++j)
    for (std::size_t r = 0; r < R; ++r) {
      const int e = pick[r][j];
      ++picked[e];
      if (used[e] == cap) {
        ++o.dropped;
        continue;
      }
      ++used[e];
      vec h(H);
      for (int k = 0; k < H; ++k) {
        double a = 0;
        for (int d = 0; d < D; ++d) a += x[r * D + d] * w_in[(e * D + d) * H + k];
        h[k] = gelu_ref(a);
      }
      for (int d = 0; d < D; ++d) {
        double a = 0;
        for (int k = 0; k < H; ++k) a += h[k] * w_out[(e * H + k) * D + d];
        o.y[r * D + d] += p[r][e] * a;
      }
    }
  const double T = double(R);
  for (int e = 0; e < E; ++e) {
    double P = 0;
    for (std::size_t r = 0; r < R; ++r) P += p[r][e];
    o.aux += alpha * E * (picked[e] / (T * K)) * (P / T);
  }
  return o;
}

// ---- the layer as the executor runs it, on buffers of exactly memory()'s sizes ----------
template <class L>
struct moe_run {
  std::size_t R;
  buffer_needs m;
  vec stash_values, stash_stats, scratch_values, scratch_stats;
  std::vector<std::int32_t> stash_ids;
  B::queue q{1};
  comm::self_communicator self{};
  exec::aux_loss_io aux{};
  double books[3] = {0, 0, 0};
  explicit moe_run(std::size_t rows) : R(rows) {
    local_dims d;
    d.rows = d.out_rows = static_cast<long long>(rows);
    d.in_cols = d.out_cols = L::features;
    d.in = d.out = shape_v<L::features>;
    m = L::memory(d);
    // NaN-filled: a buffer read before it is written shows in the results
    stash_values.assign(static_cast<std::size_t>(m.stash_values), NAN);
    stash_stats.assign(static_cast<std::size_t>(m.stash_stats), NAN);
    stash_ids.assign(static_cast<std::size_t>(m.stash_ids), -7);
    scratch_values.assign(static_cast<std::size_t>(m.scratch_values), NAN);
    scratch_stats.assign(static_cast<std::size_t>(m.scratch_stats), NAN);
  }
  ctx_t context(std::vector<vec>& params, std::vector<vec>& grads, double aux_scale) {
    ctx_t c{q, self};
    c.rows = R;
    c.in_cols = c.out_cols = L::features;
    for (std::size_t k = 0; k < 3; ++k) c.w[k] = params[k].data(), c.g[k] = grads[k].data();
    c.stash_values = stash_values.data();
    c.stash_stats = stash_stats.data();
    c.stash_ids = stash_ids.data();
    c.scratch_values = scratch_values.data();
    c.scratch_stats = scratch_stats.data();
    aux.scale = aux_scale;
    aux.rows = 1.0;  // books[0] receives aux itself
    aux.acc = books;
    c.aux = &aux;
    return c;
  }
};

template <class L>
std::vector<vec> random_params(double scale) {
  const auto E = L::experts, D = L::features, H = L::hidden;
  return {randn(std::size_t(D * E), scale), randn(std::size_t(E * D * H), scale), randn(std::size_t(E * H * D), scale)};
}

// Forward through the library against the reference; returns how many choices dropped.
template <class L>
int check_forward(std::size_t R, const vec& x, std::vector<vec> params) {
  std::vector<vec> grads{vec(params[0].size()), vec(params[1].size()), vec(params[2].size())};
  moe_run<L> run(R);
  ctx_t c = run.context(params, grads, 1.0);
  vec y(R * L::features, NAN);
  c.x = x.data();
  c.y = y.data();
  L::forward(c);
  const ref_out ref = moe_reference(L::experts, L::features, L::hidden, L::top_k, L::capacity_percent, L::aux_alpha,
                                    R, x, params[0], params[1], params[2]);
  double worst = 0;
  for (std::size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::abs(y[i] - ref.y[i]));
  MESSAGE("R " << R << ", " << L::top_k << " of " << L::experts << ", capacity " << L::capacity(long(R)) << ": dropped "
                << ref.dropped << ", worst |y - reference| " << worst << ", aux " << run.books[0] << " (reference "
                << ref.aux << ", difference " << std::abs(run.books[0] - ref.aux) << ")");
  CHECK(worst < 1e-12);
  CHECK(std::abs(run.books[0] - ref.aux) < 1e-12);
  CHECK(ref.aux > 0);
  return ref.dropped;
}

// Backward against central differences of Σ w·y + aux_scale · aux.
template <class L>
void check_backward(std::size_t R, vec x, std::vector<vec> params, double aux_scale, double w_scale = 1.0) {
  const std::size_t nx = R * L::features;
  const vec w = randn(nx, w_scale);
  auto objective = [&] {
    std::vector<vec> grads{vec(params[0].size()), vec(params[1].size()), vec(params[2].size())};
    moe_run<L> run(R);
    ctx_t c = run.context(params, grads, aux_scale);
    vec y(nx);
    c.x = x.data();
    c.y = y.data();
    L::forward(c);
    double s = aux_scale * run.books[0];
    for (std::size_t i = 0; i < nx; ++i) s += w[i] * y[i];
    return s;
  };
  std::vector<vec> grads{vec(params[0].size()), vec(params[1].size()), vec(params[2].size())};
  moe_run<L> run(R);
  ctx_t c = run.context(params, grads, aux_scale);
  vec y(nx), dx(nx, NAN);
  c.x = x.data();
  c.y = y.data();
  L::forward(c);
  c.dy = w.data();
  c.dx = dx.data();
  L::backward(c);
  auto fd = [&](double& v) { return central_difference(v, objective); };
  // relative L2 error; a gradient that should be nonzero is checked to be
  const bool aux_only = w_scale == 0.0;  // then the experts' weights get no gradient
  auto check = [&](const std::string& what, const vec& a, const vec& b, bool nonzero) {
    double num = 0, den = 0;
    for (std::size_t i = 0; i < a.size(); ++i) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
    const double err = nonzero ? std::sqrt(num / std::max(den, 1e-300)) : std::sqrt(num);
    const std::string label = std::to_string(L::top_k) + "-of-" + std::to_string(L::experts) +
                              (aux_only ? " aux only " : " ") + what;
    MESSAGE(label << ": relative error " << err << " (|grad| " << std::sqrt(den) << ")");
    if (nonzero) CHECK(den > 0);
    CHECK(err < 1e-6);
  };
  vec num(nx);
  for (std::size_t i = 0; i < nx; ++i) num[i] = fd(x[i]);
  check("dx", dx, num, true);
  const std::string names[3] = {"gate", "w_in", "w_out"};
  for (std::size_t k = 0; k < 3; ++k) {
    vec n(params[k].size());
    for (std::size_t i = 0; i < n.size(); ++i) n[i] = fd(params[k][i]);
    check(names[k], grads[k], n, k == 0 || !aux_only);
  }
}

}  // namespace

TEST_CASE("MoE forward equals the float64 reference, with and without dropped tokens") {
  using Few = layers::MoE<4, 6, 10, 2, 50, 20>;    // capacity ceil(0.5·12·2/4) = 3 of 24 choices
  using Ample = layers::MoE<4, 6, 10, 2, 400>;     // capacity = the 12 tokens: none dropped
  using Switch = layers::MoE<3, 5, 7, 1, 100, 0>;  // top-1, alpha 0 (then aux = 0: checked apart)
  static_assert(Few::capacity(12) == 3 && Ample::capacity(12) == 12 && Switch::capacity(9) == 3);
  static_assert(std::is_same_v<layers::MoE<4, 6, 10, 2>, layers::MoE<4, 6, 10, 2, 125, 10>>);
  const vec x = randn(12 * 6);
  const auto p = random_params<Few>(0.7);
  CHECK(check_forward<Few>(12, x, p) > 0);
  CHECK(check_forward<Ample>(12, x, p) == 0);
  CHECK(check_forward<layers::MoE<4, 6, 10, 2, 125, 10>>(12, x, p) >= 0);  // the default capacity
  // top-1 Switch routing, with alpha 10 so that the aux loss is checked
  const vec xs = randn(9 * 5, 2.0);
  CHECK(check_forward<layers::MoE<3, 5, 7, 1, 100, 10000>>(9, xs, random_params<Switch>(0.8)) >= 0);
}

TEST_CASE("MoE ties go to the lower expert; full experts drop later tokens and second choices") {
  // a zero gate: every probability 1/4, so every token picks experts 0 and 1 (in that
  // order); capacity ceil(1·8·2/4) = 4: tokens 0-3 get both, tokens 4-7 neither
  using L = layers::MoE<4, 3, 5, 2, 100>;
  auto params = random_params<L>(0.6);
  std::fill(params[0].begin(), params[0].end(), 0.0);
  const vec x = randn(8 * 3);
  CHECK(check_forward<L>(8, x, params) == 8);
  std::vector<vec> grads{vec(params[0].size()), vec(params[1].size()), vec(params[2].size())};
  moe_run<L> run(8);
  ctx_t c = run.context(params, grads, 1.0);
  vec y(8 * 3);
  c.x = x.data();
  c.y = y.data();
  L::forward(c);
  for (std::size_t r = 0; r < 8; ++r)
    for (std::size_t d = 0; d < 3; ++d) CHECK((r < 4 ? y[r * 3 + d] != 0.0 : y[r * 3 + d] == 0.0));
  // aux = alpha·E·Σ f·P = 0.01 · 4 · (½·¼ + ½·¼)
  CHECK(run.books[0] == doctest::Approx(0.01).epsilon(1e-14));
}

TEST_CASE("MoE backward equals finite differences (router, experts, aux loss, dropping)") {
  // dropping active: capacity 3 of 24 choices; alpha 0.3 so that the aux gradient matters
  using Drop = layers::MoE<4, 5, 6, 2, 50, 300>;
  check_backward<Drop>(12, randn(12 * 5), random_params<Drop>(0.7), 0.8);
  // no dropping, top-1 and top-3
  using One = layers::MoE<3, 4, 5, 1, 300, 100>;
  check_backward<One>(7, randn(7 * 4), random_params<One>(0.8), 1.3);
  using Three = layers::MoE<5, 4, 3, 3, 125, 50>;
  check_backward<Three>(6, randn(6 * 4), random_params<Three>(0.8), 0.5);
  // the aux loss alone (dy = 0): its gradient reaches x and the gate only through P_e
  check_backward<Drop>(12, randn(12 * 5), random_params<Drop>(0.7), 2.0, /*w_scale=*/0.0);
}

namespace {
// One MoE and a classifier: step loss = mean cross-entropy + aux averaged over the two
// micro-batches; lr 0 steps read the loss, an lr 1 SGD step the gradient (p' = p − g).
constexpr int Dm = 6, Cm = 5, Bm = 8;
using Mo = layers::MoE<4, Dm, 9, 2, 75, 200>;
using Small = Plan<Replicate<1, Mo, Linear<Dm, Cm>>, Loss<SoftmaxCrossEntropy>, MicroBatch<Bm>, NumMicroBatch<2>,
                   Element<double>>;
}  // namespace

TEST_CASE("MoE through the trainer: the step's loss is cross-entropy + mean aux, its gradient matches") {
  auto w = local_world<Host>();
  auto t = make_trainer<Small>(w, SGD{.lr = 0.0}, 3);
  auto p = t.gather_parameters();
  for (auto& layer : p)
    for (auto& tensor : layer)
      for (auto& v : tensor) v = randn(1, 0.6)[0];
  const vec x = randn(2 * Bm * Dm);
  std::vector<std::int32_t> y(2 * Bm);
  for (auto& v : y) v = std::int32_t(rng() % Cm);
  const batch_view<double> b{.inputs = x, .labels = y, .samples = 2 * Bm};
  auto loss_at = [&](const std::vector<std::vector<vec>>& q) {
    t.set_parameters(q);
    return t.step(b).loss;
  };
  // reported loss − evaluated cross-entropy = the reference aux averaged over micro-batches
  const double loss = loss_at(p);
  t.set_parameters(p);
  const double ce = t.evaluate(b, 2 * Bm).loss;
  double aux = 0;
  for (int mb = 0; mb < 2; ++mb) {
    const vec xm(x.begin() + mb * Bm * Dm, x.begin() + (mb + 1) * Bm * Dm);
    aux += 0.5 * moe_reference(4, Dm, 9, 2, 75, 0.2, Bm, xm, p[0][0], p[0][1], p[0][2]).aux;
  }
  CHECK(aux > 0.1);
  CHECK(loss - ce == doctest::Approx(aux).epsilon(1e-12));
  // the gradient an SGD step with lr 1 applies, against differences of the reported loss
  auto ts = make_trainer<Small>(w, SGD{.lr = 1.0}, 3);
  ts.set_parameters(p);
  ts.step(b);
  const auto after = ts.gather_parameters();
  const double eps = 1e-6;
  for (std::size_t l = 0; l < p.size(); ++l)
    for (std::size_t k = 0; k < p[l].size(); ++k) {
      double num2 = 0, den2 = 0;
      for (std::size_t i = 0; i < p[l][k].size(); ++i) {
        auto q = p;
        q[l][k][i] += eps;
        const double up = loss_at(q);
        q[l][k][i] -= 2 * eps;
        const double down = loss_at(q);
        const double fd = (up - down) / (2 * eps), g = p[l][k][i] - after[l][k][i];
        num2 += (fd - g) * (fd - g), den2 += fd * fd;
      }
      INFO("layer " << l << " tensor " << k);
      CHECK(den2 > 0);
      CHECK(std::sqrt(num2 / den2) < 1e-6);
    }
}

namespace {
constexpr int V = 11, S = 4, D = 8, H = 2;
using Attn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>;
using MLP = Residual<LayerNorm<D>, Linear<D, 2 * D>, GeLU, Linear<2 * D, D>>;
using MoEBlock = Residual<LayerNorm<D>, MoE<4, D, 2 * D, 2>>;
using GPT = Plan<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, Attn, MLP, Attn, MoEBlock, LayerNorm<D>,
                           Linear<D, V>>,
                 Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>, NumMicroBatch<2>, Element<double>>;
static_assert(GPT::valid);
}  // namespace

TEST_CASE("a small GPT with an MoE block learns on one device") {
  auto w = local_world<Host>();
  auto t = make_trainer<GPT>(w, Adam{.lr = 1e-2}, 11);
  // a next-token pattern: (a, a+1, a+2, a+3) mod V, labels shifted by one
  std::vector<double> x(8 * S);
  std::vector<std::int32_t> y(8 * S);
  for (int s = 0; s < 8; ++s)
    for (int i = 0; i < S; ++i) x[std::size_t(s * S + i)] = (s + i) % V, y[std::size_t(s * S + i)] = (s + i + 1) % V;
  const batch_view<double> b{.inputs = x, .labels = y, .samples = 8};
  const double first = t.step(b).loss;
  double last = first;
  for (int i = 0; i < 60; ++i) last = t.step(b).loss;
  MESSAGE("loss " << first << " -> " << last);
  CHECK(std::isfinite(last));
  CHECK(last < 0.5 * first);
}

TEST_CASE("MoE expert parallel: slots from the gathered routing rows equal one device's") {
  // 24 tokens, 4 experts, top-2, a capacity that drops: devices of n = 2, 3, 4 each hold a
  // contiguous block of rows and assign, from every device's per-rank counts, the slots
  // one device gives the whole micro-batch.
  constexpr int E = 4, K = 2;
  constexpr std::size_t rows = 24;
  B::queue q{1};
  std::uniform_int_distribution<int> pick(0, E - 1);
  std::vector<std::int32_t> choice(rows * K);
  for (std::size_t r = 0; r < rows; ++r) {
    choice[r * K] = pick(rng);
    do choice[r * K + 1] = pick(rng);
    while (choice[r * K + 1] == choice[r * K]);
  }
  for (const std::size_t cap : {std::size_t(5), std::size_t(9), rows}) {
    std::vector<std::int32_t> slot_one(rows * K), token_one(E * cap);
    backend::host::moe_assign(q, rows, E, K, cap, choice.data(), slot_one.data(), token_one.data());
    for (const int n : {2, 3, 4}) {
      const std::size_t local = rows / std::size_t(n), stride = std::size_t(K + 1) * E;
      std::vector<double> table(std::size_t(n) * stride);
      for (int p = 0; p < n; ++p) {
        std::vector<double> stats(2 * E, 0.5 * p);  // probability sums: only carried along
        backend::host::moe_route_counts(q, local, E, K, choice.data() + std::size_t(p) * local * K, stats.data(),
                                        table.data() + std::size_t(p) * stride);
      }
      std::vector<std::int32_t> filled(E * cap, -1);
      for (int p = 0; p < n; ++p) {
        std::vector<std::int32_t> slot(local * K), token(E * cap);
        std::vector<double> stats(2 * E);
        backend::host::moe_assign_part(q, local, E, K, cap, table.data(), n, p,
                                       choice.data() + std::size_t(p) * local * K, slot.data(), token.data(),
                                       stats.data());
        for (std::size_t c = 0; c < local * K; ++c) CHECK(slot[c] == slot_one[std::size_t(p) * local * K + c]);
        for (std::size_t s = 0; s < E * cap; ++s)
          if (token[s] >= 0) {
            CHECK(filled[s] < 0);
            filled[s] = token[s] + std::int32_t(std::size_t(p) * local * K);
          }
        for (int e = 0; e < E; ++e) {
          CHECK(stats[e] == double(std::count(choice.begin(), choice.end(), e)));
          CHECK(stats[E + e] == 0.5 * n * (n - 1) / 2);
        }
      }
      CHECK(filled == token_one);
    }
  }
}
