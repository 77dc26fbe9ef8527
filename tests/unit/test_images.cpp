// A small ResNet as the trainer runs it — a convolution stem with batch normalisation and
// max pooling, a down-sampling residual block whose skip path is a projection
// (Residual<Shortcut<...>, ...>), global average pooling and a classifier — checked end to
// end in float64: the gradient one step applies (SGD, lr 1: p' = p − g) against central
// finite differences of the evaluated loss, on a sample of elements of every tensor.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

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
  auto loss = [&] { return t.evaluate(b, 3).loss; };
  const double l0 = loss();
  const step_result r = t.step(b);
  CHECK(std::abs(r.loss - l0) < 1e-13);
  const auto after = t.gather_parameters();
  double worst = 0;
  int checked = 0;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (std::size_t i = 0; i < p.size(); ++i)
    for (std::size_t k = 0; k < p[i].size(); ++k)
      for (int sample = 0; sample < 5; ++sample) {
        const std::size_t e = std::size_t(u(g) * double(p[i][k].size()));
        const double grad = p[i][k][e] - after[i][k][e];
        auto q = p;
        const double h = 1e-6;
        q[i][k][e] += h;
        t.set_parameters(q);
        const double up = loss();
        q[i][k][e] -= 2 * h;
        t.set_parameters(q);
        const double down = loss();
        const double fd = (up - down) / (2 * h);
        const double err = std::abs(fd - grad) / std::max(1e-4, std::abs(fd));
        INFO("layer " << i << " (" << Net::layer_plans[i].desc.name << ") tensor " << k << " element " << e << ": fd "
                      << fd << " step " << grad);
        CHECK(err < 1e-5);
        worst = std::max(worst, err);
        ++checked;
      }
  MESSAGE("ResNet gradient vs finite differences: " << checked << " elements, worst relative error " << worst);
}

TEST_CASE("BatchNorm2d refuses an evaluation with padding (it would normalise the padding in), on every rank") {
  auto w = local_world<Host>();
  auto t = make_trainer<Net>(w, SGD{.lr = 0.1}, 5);
  std::vector<double> x(3 * 8 * 8 * 2, 0.5);
  std::vector<std::int32_t> y(3, 1);
  const batch_view<double> b{.inputs = x, .labels = y, .samples = 3};
  CHECK(t.evaluate(b, 3).rows == 3);
  CHECK_THROWS_WITH_AS(t.evaluate(b, 2), doctest::Contains("BatchNorm2d normalises with the statistics"), agreed_error);
}
