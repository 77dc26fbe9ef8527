// The trainer's training options against closed forms: the learning-rate schedule's
// factors, weight-decay groups (AdamW's decoupled decay leaves exactly −lr·wd·p between a
// run that decays a tensor and one that does not), and the learning rate a step uses
// (SGD without momentum moves p by exactly −lr·factor·g).
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

using namespace strata;

namespace {
constexpr int V = 11, S = 4, D = 8, H = 2;
using Attn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>;
using MLP = Residual<LayerNorm<D>, Linear<D, 2 * D>, GeLU, Linear<2 * D, D>>;
using GPT = Plan<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, Attn, MLP, LayerNorm<D>, Linear<D, V>>, Input<S>,
                 Loss<SoftmaxCrossEntropy>, MicroBatch<3>, Element<double>>;

constexpr lr_schedule cosine{.kind = lr_schedule::decay::cosine, .warmup = 4, .total = 14, .final_ratio = 0.1};
constexpr lr_schedule linear{.kind = lr_schedule::decay::linear, .warmup = 0, .total = 10, .final_ratio = 0.0};
static_assert(cosine.factor(1) == 0.25 && cosine.factor(4) == 1.0);  // warm-up: s / warmup
static_assert(linear.factor(5) == 0.5 && linear.factor(10) == 0.0 && linear.factor(12) == 0.0);
static_assert(lr_schedule{}.factor(1) == 1.0 && lr_schedule{}.factor(1000) == 1.0);
static_assert(lr_schedule{.warmup = 10}.factor(5) == 0.5 && lr_schedule{.warmup = 10}.factor(50) == 1.0);

std::vector<double> tokens(std::size_t n, unsigned seed) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = double((i * 7 + seed * 3) % V);
  return v;
}
}  // namespace

TEST_CASE("cosine schedule: halfway down at the middle of the decay, the floor at the end") {
  CHECK(cosine.factor(9) == doctest::Approx(0.1 + 0.9 * 0.5).epsilon(1e-15));  // p = 1/2
  CHECK(cosine.factor(14) == doctest::Approx(0.1).epsilon(1e-15));
  CHECK(cosine.factor(100) == doctest::Approx(0.1).epsilon(1e-15));
  CHECK(cosine.factor(6) == doctest::Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.2))).epsilon(1e-15));
}

TEST_CASE("weight decay on matrices only leaves biases and norms undecayed") {
  auto w = local_world<Host>();
  const AdamW opt{.lr = 0.05, .weight_decay = 0.3};
  auto all = make_trainer<GPT>(w, opt, 7);
  auto mat = make_trainer<GPT>(w, opt, 7);
  mat.set_training_options({.decay = decay_on::matrices});
  const auto p0 = all.gather_parameters();
  const auto x = tokens(3 * S, 1);
  std::vector<std::int32_t> y(3 * S);
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = std::int32_t((i * 5 + 2) % V);
  const batch_view<double> b{.inputs = x, .labels = y, .samples = 3};
  all.step(b);
  mat.step(b);
  const auto pa = all.gather_parameters(), pm = mat.gather_parameters();
  int decayed = 0, kept = 0;
  for (std::size_t i = 0; i < p0.size(); ++i)
    for (std::size_t k = 0; k < p0[i].size(); ++k) {
      const bool matrix = GPT::layer_plans[i].desc.params[k].shape.rank >= 2;
      (matrix ? decayed : kept) += 1;
      for (std::size_t j = 0; j < p0[i][k].size(); ++j) {
        // AdamW: p' = p (1 − lr wd) − lr·u, u the same in both runs (the same gradient)
        const double expect = matrix ? 0.0 : -opt.lr * opt.weight_decay * p0[i][k][j];
        CHECK(pa[i][k][j] - pm[i][k][j] == doctest::Approx(expect).epsilon(1e-12).scale(1e-12));
      }
    }
  CHECK(decayed >= 6);
  CHECK(kept >= 8);  // biases, LayerNorm gains and shifts
}

TEST_CASE("each update uses lr times the schedule's factor") {
  auto w = local_world<Host>();
  const SGD opt{.lr = 0.2};
  auto fixed = make_trainer<GPT>(w, opt, 3);
  auto sched = make_trainer<GPT>(w, opt, 3);
  sched.set_training_options({.schedule = cosine});
  const auto x = tokens(3 * S, 2);
  std::vector<std::int32_t> y(3 * S, 4);
  const batch_view<double> b{.inputs = x, .labels = y, .samples = 3};
  // same parameters before every step: copy the scheduled run's into the fixed one
  for (long long s = 1; s <= 6; ++s) {
    CHECK(sched.learning_rate() == doctest::Approx(0.2 * cosine.factor(s)).epsilon(1e-15));
    const auto p0 = sched.gather_parameters();
    fixed.set_parameters(p0);
    fixed.step(b);
    sched.step(b);
    const auto pf = fixed.gather_parameters(), ps = sched.gather_parameters();
    for (std::size_t i = 0; i < p0.size(); ++i)
      for (std::size_t k = 0; k < p0[i].size(); ++k)
        for (std::size_t j = 0; j < p0[i][k].size(); ++j)
          CHECK(ps[i][k][j] - p0[i][k][j] ==
                doctest::Approx(cosine.factor(s) * (pf[i][k][j] - p0[i][k][j])).epsilon(1e-10).scale(1e-14));
  }
}

TEST_CASE("rows labelled ignore_label: the step's loss and gradient are the mean over the counted rows") {
  // A: samples 0 and 1 labelled, samples 2 and 3 all ignore_label; B: samples 0, 1, 0, 1.
  // The mean over A's counted rows is B's mean, so one SGD step moves both alike.
  using P = Plan<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, Attn, MLP, LayerNorm<D>, Linear<D, V>>, Input<S>,
                 Loss<SoftmaxCrossEntropy>, MicroBatch<2>, NumMicroBatch<2>, Element<double>>;
  auto w = local_world<Host>();
  auto a = make_trainer<P>(w, SGD{.lr = 0.5}, 3);
  auto b = make_trainer<P>(w, SGD{.lr = 0.5}, 3);
  const auto first = tokens(2 * S, 1), other = tokens(2 * S, 5);
  std::vector<std::int32_t> y2(2 * S);
  for (std::size_t i = 0; i < y2.size(); ++i) y2[i] = std::int32_t((i * 5 + 2) % V);
  std::vector<double> xa = first, xb = first;
  xa.insert(xa.end(), other.begin(), other.end());
  xb.insert(xb.end(), first.begin(), first.end());
  std::vector<std::int32_t> ya = y2, yb = y2;
  ya.insert(ya.end(), 2 * S, ignore_label);
  yb.insert(yb.end(), y2.begin(), y2.end());
  const step_result ra = a.step({.inputs = xa, .labels = ya, .samples = 4});
  const step_result rb = b.step({.inputs = xb, .labels = yb, .samples = 4});
  CHECK(ra.rows == 2 * S);
  CHECK(rb.rows == 4 * S);
  CHECK(ra.loss == doctest::Approx(rb.loss).epsilon(1e-14));
  const auto pa = a.gather_parameters(), pb = b.gather_parameters();
  double worst = 0;
  for (std::size_t i = 0; i < pa.size(); ++i)
    for (std::size_t k = 0; k < pa[i].size(); ++k)
      for (std::size_t e = 0; e < pa[i][k].size(); ++e)
        worst = std::max(worst, std::abs(pa[i][k][e] - pb[i][k][e]) / std::max(std::abs(pb[i][k][e]), 1e-3));
  CHECK(worst < 1e-12);
  // another negative label is refused on every rank before the step
  ya[3] = -1;
  CHECK_THROWS_WITH_AS(a.step({.inputs = xa, .labels = ya, .samples = 4}),
                       doctest::Contains("label -1 at position 3 is outside [0, 11) and is not -100 (ignored)"),
                       agreed_error);
}

TEST_CASE("ignored labels with an auxiliary loss (MoE) are refused, naming the position") {
  using P = Plan<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, MoE<4, D, 2 * D, 2>, Linear<D, V>>, Input<S>,
                 Loss<SoftmaxCrossEntropy>, MicroBatch<2>, Element<double>>;
  auto w = local_world<Host>();
  auto t = make_trainer<P>(w, SGD{.lr = 0.1}, 3);
  const auto x = tokens(2 * S, 1);
  std::vector<std::int32_t> y(2 * S, 1);
  y[5] = ignore_label;
  CHECK_THROWS_WITH_AS(t.step({.inputs = x, .labels = y, .samples = 2}),
                       doctest::Contains("label -100 (ignored) at position 5: ignored labels are not supported with an "
                                         "auxiliary loss (MoE) yet"),
                       agreed_error);
}
