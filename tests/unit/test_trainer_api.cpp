// The trainer's public surface on one device: the plan members a data loader reads,
// named batches checked against the plan, run-time gradient accumulation (equal to the
// same number of micro-batches planned at compile time), the gradient multiplier, the
// replica check, and errors that stay exceptions in a world of one.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>

using namespace strata;

namespace {

using CE = Loss<SoftmaxCrossEntropy>;
using MLP = Replicate<1, Linear<6, 12>, GeLU, Linear<12, 5>>;
using One = Plan<MLP, CE, MicroBatch<4>>;                       // 4 samples a step
using Three = Plan<MLP, CE, MicroBatch<4>, NumMicroBatch<3>>;  // 12 samples a step
using Tokens = Plan<Replicate<1, Embedding<40, 8>, Linear<8, 7>>, Input<3>, CE, MicroBatch<2>>;

static_assert(One::replica_batch == 4 && Three::replica_batch == 12);
static_assert(One::input_elems == 6 && One::classes == 5 && One::labels_per_sample == 1);
static_assert(!One::reads_token_ids && One::vocabulary == 0);
static_assert(Tokens::reads_token_ids && Tokens::vocabulary == 40 && Tokens::input_elems == 3);
static_assert(Tokens::labels_per_sample == 3 && Tokens::classes == 7);  // one label per token

void data(int step, std::vector<double>& x, std::vector<std::int32_t>& y, std::size_t n) {
  std::mt19937_64 g(100 + std::uint64_t(step));
  std::normal_distribution<double> nd;
  x.resize(n * 6);
  y.resize(n);
  for (auto& v : x) v = nd(g);
  for (auto& v : y) v = std::int32_t(g() % 5);
}

double worst_difference(const std::vector<std::vector<std::vector<double>>>& a,
                        const std::vector<std::vector<std::vector<double>>>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t k = 0; k < a[i].size(); ++k)
      for (std::size_t e = 0; e < a[i][k].size(); ++e) worst = std::max(worst, std::abs(a[i][k][e] - b[i][k][e]));
  return worst;
}

}  // namespace

TEST_CASE("a step of k replica batches accumulates like k planned micro-batches") {
  for (const optimizer& opt : {optimizer(SGD{.lr = 0.1, .momentum = 0.9}), optimizer(Adam{.lr = 1e-2})}) {
    auto w = local_world<Host>();
    auto accumulated = make_trainer<One, double>(w, opt, 7);
    auto planned = make_trainer<Three, double>(w, opt, 7);
    std::vector<double> x;
    std::vector<std::int32_t> y;
    for (int s = 0; s < 5; ++s) {
      data(s, x, y, 12);
      const batch_view<double> b{.inputs = x, .labels = y, .samples = 12};
      const step_result a = accumulated.step(b), p = planned.step(b);
      CHECK(a.rows == 12);
      CHECK(std::abs(a.loss - p.loss) <= 1e-13 * std::abs(p.loss));
      CHECK(a.correct == p.correct);
    }
    CHECK(worst_difference(accumulated.gather_parameters(), planned.gather_parameters()) < 1e-13);
  }
}

TEST_CASE("the gradient multiplier scales every gradient") {
  // plain SGD: gradients times 2 is the learning rate times 2
  auto w = local_world<Host>();
  auto doubled = make_trainer<One, double>(w, SGD{.lr = 0.05}, 3);
  auto faster = make_trainer<One, double>(w, SGD{.lr = 0.1}, 3);
  doubled.set_gradient_multiplier(2.0);
  std::vector<double> x;
  std::vector<std::int32_t> y;
  for (int s = 0; s < 4; ++s) {
    data(s, x, y, 4);
    const batch_view<double> b{.inputs = x, .labels = y, .samples = 4};
    CHECK(std::abs(doubled.step(b).loss - faster.step(b).loss) < 1e-13);
  }
  CHECK(worst_difference(doubled.gather_parameters(), faster.gather_parameters()) < 1e-13);
}

TEST_CASE("batches are checked against the plan, with the numbers") {
  auto w = local_world<Host>();
  auto t = make_trainer<One, double>(w, SGD{}, 1);
  std::vector<double> x;
  std::vector<std::int32_t> y;
  data(0, x, y, 8);
  const std::span<const double> xs(x);
  const std::span<const std::int32_t> ys(y);
  CHECK_THROWS_WITH_AS(t.step({.inputs = xs.first(18), .labels = ys.first(3), .samples = 3}),
                       doctest::Contains("the batch holds 3 samples but this plan's replica consumes 4 per step"),
                       agreed_error);
  CHECK_THROWS_WITH_AS(t.step({.inputs = xs.first(20), .labels = ys.first(4), .samples = 4}),
                       doctest::Contains("the batch's inputs hold 20 values, not 4 samples x 6 values per sample"),
                       agreed_error);
  CHECK_THROWS_WITH_AS(t.step({.inputs = xs.first(24), .labels = ys.first(5), .samples = 4}),
                       doctest::Contains("the batch's labels hold 5 values, not 4 samples x 1 labels per sample"),
                       agreed_error);
  CHECK_THROWS_WITH_AS(t.evaluate({.inputs = xs.first(24), .labels = ys.first(4), .samples = 4}, 5),
                       doctest::Contains("the valid count 5 exceeds the batch's 4 samples"), agreed_error);
  CHECK_THROWS_WITH_AS(t.evaluate({.inputs = xs.first(12), .labels = ys.first(2), .samples = 2}, 2),
                       doctest::Contains("a positive multiple of the micro-batch 4"), agreed_error);
  // nothing was trained by the refused calls
  CHECK(t.steps() == 0);
  CHECK(std::isfinite(t.step({.inputs = xs, .labels = ys, .samples = 8}).loss));  // two chunks: accumulated
  CHECK(t.steps() == 1);
}

TEST_CASE("evaluate: rows past the valid count are padding") {
  // 8 rows, 6 valid, against the same 6 rows through a plan whose micro-batch is 2
  using Two = Plan<MLP, CE, MicroBatch<2>>;
  auto w = local_world<Host>();
  auto t = make_trainer<One, double>(w, SGD{}, 1);
  auto r = make_trainer<Two, double>(w, SGD{}, 1);  // same seed: the same parameters
  std::vector<double> x;
  std::vector<std::int32_t> y;
  data(0, x, y, 8);
  const step_result padded = t.evaluate({.inputs = x, .labels = y, .samples = 8}, 6);
  const step_result exact = r.evaluate({.inputs = std::span<const double>(x).first(36),
                                        .labels = std::span<const std::int32_t>(y).first(6), .samples = 6},
                                       6);
  CHECK(padded.rows == 6);
  CHECK(std::abs(padded.loss - exact.loss) <= 1e-14 * exact.loss);
  CHECK(padded.correct == exact.correct);
  CHECK(t.evaluate({.inputs = x, .labels = y, .samples = 8}, 0).rows == 0);
}

TEST_CASE("one device: no replicas to compare; errors stay exceptions") {
  auto w = local_world<Host>();
  auto t = make_trainer<One, double>(w, SGD{}, 1);
  const replica_report r = t.check_replicas();
  CHECK(r.identical);
  CHECK(r.tensors_compared == 0);
  CHECK_FALSE(w.can_abort());  // a world of one has nobody to leave waiting
}

// A TiedHead reads its Embedding's table: one tensor used twice. Its update is the sum of
// the two uses' gradients — the same model untied (a bias-free head holding the table's
// transpose) gives each use's gradient apart — and the gradient norm counts it once.
TEST_CASE("a tied head: one tensor, the sum of both uses' gradients, counted once in the norm") {
  constexpr int V = 11, D = 6, S = 3;
  using Tied = Plan<Replicate<1, Embedding<V, D>, Linear<D, D>, GeLU, TiedHead<V, D>>, Input<S>, CE, MicroBatch<2>>;
  using Untied = Plan<Replicate<1, Embedding<V, D>, Linear<D, D>, GeLU, Linear<D, V, false>>, Input<S>, CE, MicroBatch<2>>;
  static_assert(Tied::tie.any() && Tied::tie.owner == 0 && Tied::tie.user == 3 && !Untied::tie.any());
  static_assert(Tied::model_parameters == Untied::model_parameters - V * D);  // the table once
  auto w = local_world<Host>();
  const double lr = 0.1;
  auto tied = make_trainer<Tied, double>(w, SGD{.lr = lr}, 5);
  auto untied = make_trainer<Untied, double>(w, SGD{.lr = lr}, 5);
  const auto start = tied.gather_parameters();
  CHECK(start[3][0] == start[0][0]);  // the head's copy starts as the table
  auto transposed = [&](const std::vector<double>& t) {  // [V, D] -> [D, V]
    std::vector<double> r(t.size());
    for (int v = 0; v < V; ++v)
      for (int d = 0; d < D; ++d) r[std::size_t(d * V + v)] = t[std::size_t(v * D + d)];
    return r;
  };
  auto u0 = start;
  u0[3][0] = transposed(start[0][0]);
  untied.set_parameters(u0);
  tied.set_training_options({.clip_norm = 1e9});  // the norm is computed, nothing clipped
  const std::vector<double> ids{1, 4, 9, 10, 0, 4};
  const std::vector<std::int32_t> labels{4, 9, 2, 0, 7, 10};
  const step_result a = tied.step({.inputs = ids, .labels = labels, .samples = 2});
  const step_result b = untied.step({.inputs = ids, .labels = labels, .samples = 2});
  CHECK(std::abs(a.loss - b.loss) < 1e-14);
  const auto t1 = tied.gather_parameters(), u1 = untied.gather_parameters();
  CHECK(t1[3][0] == t1[0][0]);  // the copies took the same update
  double worst = 0, norm2 = 0;
  std::vector<double> head_step(u1[3][0].size());  // [D, V] -> [V, D]
  for (int v = 0; v < V; ++v)
    for (int d = 0; d < D; ++d) head_step[std::size_t(v * D + d)] = u1[3][0][std::size_t(d * V + v)];
  for (std::size_t e = 0; e < t1[0][0].size(); ++e) {
    const double sum = (u1[0][0][e] - start[0][0][e]) + (head_step[e] - start[0][0][e]);
    worst = std::max(worst, std::abs((t1[0][0][e] - start[0][0][e]) - sum));
  }
  CHECK(worst < 1e-14);
  // ‖g‖ from the updates (Δ = −lr·g), the table once
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t k = 0; k < t1[i].size(); ++k)
      for (std::size_t e = 0; e < t1[i][k].size(); ++e) norm2 += std::pow((t1[i][k][e] - start[i][k][e]) / lr, 2);
  CHECK(std::abs(tied.last_gradient_norm() - std::sqrt(norm2)) < 1e-10 * std::sqrt(norm2));
  // the two places of the table must be given alike
  auto bad = start;
  bad[3][0][5] += 1;
  CHECK_THROWS_WITH_AS(tied.set_parameters(bad), doctest::Contains("tied to layer 0"), std::exception);
}
