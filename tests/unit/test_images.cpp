// A small ResNet as the trainer runs it — a convolution stem with batch normalisation and
// max pooling, a down-sampling residual block whose skip path is a projection
// (Residual<Shortcut<...>, ...>), global average pooling and a classifier — checked end to
// end in float64: the gradient one step applies (SGD, lr 1: p' = p − g) against central
// finite differences of the training loss, on a sample of elements of every tensor; and
// BatchNorm2d's running statistics against their closed form, and through a checkpoint.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <random>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

#include "step_gradient.hpp"
#include "temp_dir.hpp"

using namespace strata;

namespace {

using Down = Residual<Shortcut<Conv2d<4, 6, 1, 2, 0, false>, BatchNorm2d<6>>,  // 1×1, stride 2
                      Conv2d<4, 6, 3, 2, 1, false>, BatchNorm2d<6>, ReLU, Conv2d<6, 6, 3, 1, 1>, BatchNorm2d<6>>;
using Net = Plan<Replicate<1, Conv2d<2, 4, 3, 1, 1>, BatchNorm2d<4>, ReLU, MaxPool2d<2>, Down, ReLU,
                           AvgPool2d<3, 1, 1>, GlobalAvgPool2d, Linear<6, 5>>,
                 Input<8, 8, 2>, Loss<SoftmaxCrossEntropy>, MicroBatch<3>, Element<double>>;
static_assert(Net::valid && Net::classes == 5);

}  // namespace

TEST_CASE("a small ResNet's gradients (projection shortcut, batch norm, pooling) equal finite differences") {
  auto w = local_world<Host>();
  auto t = make_trainer<Net>(w, SGD{.lr = 1.0}, 5);
  auto p = t.gather_parameters();
  std::mt19937_64 g(11);
  std::normal_distribution<double> nd(0.0, 0.3);
  for (auto& layer : p)
    for (auto& tensor : layer)
      for (auto& v : tensor) v += nd(g);
  t.set_parameters(p);
  std::vector<double> x(3 * 8 * 8 * 2);
  std::vector<std::int32_t> y(3);
  for (auto& v : x) v = nd(g) * 3;
  for (auto& v : y) v = std::int32_t(g() % 5);
  const batch_view<double> b{.inputs = x, .labels = y, .samples = 3};
  // the training loss (batch statistics) of parameters q: a step that moves nothing (lr 0)
  auto probe = make_trainer<Net>(w, SGD{.lr = 0.0}, 5);
  auto loss = [&](const auto& q) {
    probe.set_parameters(q);
    return probe.step(b).loss;
  };
  const double l0 = loss(p);
  const step_result r = t.step(b);
  CHECK(std::abs(r.loss - l0) < 1e-13);
  const auto after = t.gather_parameters();
  const auto [checked, worst] = check_step_gradient(
      p, after, loss, [](std::size_t i) { return Net::layer_plans[i].desc.name; }, g, 5, 1e-6, 1e-5);
  MESSAGE("ResNet gradient vs finite differences: " << checked << " elements, worst relative error " << worst);
}

TEST_CASE("BatchNorm2d's running statistics: their closed form after two steps of two micro-batches, used in evaluation") {
  // batch norm first, so its statistics are the input's; lr 0 keeps every parameter
  using P = Plan<Replicate<1, BatchNorm2d<3>, Flatten, Linear<12, 4>>, Input<2, 2, 3>, Loss<SoftmaxCrossEntropy>,
                 MicroBatch<4>, NumMicroBatch<2>, Element<double>>;
  auto w = local_world<Host>();
  auto t = make_trainer<P>(w, SGD{.lr = 0.0}, 3);
  std::mt19937_64 g(5);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<double> x(8 * 12), z(4 * 12);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = nd(g) * double(1 + i % 3) + double(i % 3);
  for (auto& v : z) v = nd(g) * 2;
  std::vector<std::int32_t> y(8, 1), yz{0, 1, 2, 3};
  t.step({.inputs = x, .labels = y, .samples = 8});
  t.step({.inputs = x, .labels = y, .samples = 8});
  // each micro-batch's mean and unbiased variance per channel (16 values: 4 images x 4 pixels)
  std::array<double, 3> mean{}, var{};
  for (int mb = 0; mb < 2; ++mb)
    for (int c = 0; c < 3; ++c) {
      double m = 0, v = 0;
      for (int r = 0; r < 16; ++r) m += x[std::size_t((mb * 16 + r) * 3 + c)];
      m /= 16;
      for (int r = 0; r < 16; ++r) v += std::pow(x[std::size_t((mb * 16 + r) * 3 + c)] - m, 2);
      mean[std::size_t(c)] += m / 2;
      var[std::size_t(c)] += v / 15 / 2;
    }
  std::array<double, 3> rm{0, 0, 0}, rv{1, 1, 1};
  for (int step = 0; step < 2; ++step)
    for (std::size_t c = 0; c < 3; ++c) rm[c] = 0.9 * rm[c] + 0.1 * mean[c], rv[c] = 0.9 * rv[c] + 0.1 * var[c];
  // the evaluation's loss with those statistics, written out
  const auto p = t.gather_parameters();
  const auto& W = p[2][0];
  const auto& bias = p[2][1];
  std::array<double, 4> sample_loss{};
  for (std::size_t s = 0; s < 4; ++s) {
    std::array<double, 4> logit{};
    for (std::size_t o = 0; o < 4; ++o) {
      logit[o] = bias[o];
      for (std::size_t f = 0; f < 12; ++f)
        logit[o] += (z[s * 12 + f] - rm[f % 3]) / std::sqrt(rv[f % 3] + 1e-5) * W[f * 4 + o];
    }
    double mx = logit[0], se = 0;
    for (double l : logit) mx = std::max(mx, l);
    for (double l : logit) se += std::exp(l - mx);
    sample_loss[s] = std::log(se) + mx - logit[std::size_t(yz[s])];
  }
  const double all = (sample_loss[0] + sample_loss[1] + sample_loss[2] + sample_loss[3]) / 4;
  CHECK(std::abs(t.evaluate({.inputs = z, .labels = yz, .samples = 4}, 4).loss - all) < 1e-12);
  // with running statistics, padding changes nothing for the samples that count
  CHECK(std::abs(t.evaluate({.inputs = z, .labels = yz, .samples = 4}, 2).loss - (sample_loss[0] + sample_loss[1]) / 2) <
        1e-12);
}

TEST_CASE("BatchNorm2d's running statistics travel in checkpoints (running_mean, running_var)") {
  auto w = local_world<Host>();
  auto t = make_trainer<Net>(w, Adam{.lr = 1e-2}, 5);
  std::mt19937_64 g(2);
  std::normal_distribution<double> nd(1.0, 2.0);
  std::vector<double> x(3 * 8 * 8 * 2);
  std::vector<std::int32_t> y{0, 3, 4};
  for (auto& v : x) v = nd(g);
  const batch_view<double> b{.inputs = x, .labels = y, .samples = 3};
  for (int s = 0; s < 3; ++s) t.step(b);
  temp_dir dir;
  t.save_checkpoint(dir.file("ck"));
  const double before = t.evaluate(b, 3).loss;
  auto fresh = make_trainer<Net>(w, Adam{.lr = 1e-2}, 9);
  CHECK(fresh.evaluate(b, 3).loss != before);
  fresh.load_checkpoint(dir.file("ck"));
  CHECK(fresh.evaluate(b, 3).loss == before);  // the running statistics came back, bit for bit
  // one more step each: the same statistics move the same way
  t.step(b);
  fresh.step(b);
  CHECK(fresh.evaluate(b, 3).loss == t.evaluate(b, 3).loss);
  // the index names them as PyTorch does
  const auto params = read_checkpoint_parameters<Net>(dir.file("ck"));
  CHECK(params.size() == std::size_t(Net::num_layers));
  exec::ckpt::tensor_source src(dir.file("ck"));
  CHECK(src.whole("layers.1.BatchNorm2d.running_var", {4}).size() == 4);
}
