// requires: dnnl
// Float convolutions on oneDNN (strata::dnnl; backend/host/dnnl_convolution.hpp) against the
// im2col path in float64 (itself checked against the convolution written out and finite
// differences in test_layer_gradients): forward with and without bias, the filter gradient
// summed into a gradient that already holds values, the data gradient; 1×1, 3×3 and 7×7
// windows, strides 1 and 2, padding, channel counts oneDNN blocks by 16 and odd ones, one
// and two threads. Then a small ResNet's training step in float on oneDNN against the same
// step in float64.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <strata/backend/host/backend.hpp>
#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

using namespace strata;
namespace bk = strata::backend;

namespace {

static_assert(bk::detail::native_conv2d_v<bk::host::queue, float>);
static_assert(!bk::detail::native_conv2d_v<bk::host::queue, double>);

// max |a − ref| / max |ref|
template <class A>
double rel_err(const std::vector<A>& a, const std::vector<double>& ref) {
  double d = 0, m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, std::abs(double(a[i]) - ref[i]));
    m = std::max(m, std::abs(ref[i]));
  }
  return d / std::max(m, 1e-300);
}

struct conv_case {
  int H, W, C, O, K, S, P, samples;
};

}  // namespace

TEST_CASE("oneDNN float convolutions equal the im2col path in float64") {
  const conv_case cases[] = {
      {9, 9, 3, 5, 3, 2, 1, 2},     {8, 8, 4, 6, 1, 1, 0, 3},     {11, 10, 5, 7, 7, 2, 3, 2},
      {6, 6, 16, 32, 3, 1, 1, 2},   {7, 7, 64, 48, 1, 2, 0, 2},   {14, 14, 32, 64, 3, 2, 1, 1},
      {5, 5, 17, 19, 3, 1, 0, 3},   {12, 12, 3, 64, 7, 2, 3, 2},
  };
  std::mt19937 gen(7);
  std::normal_distribution<double> nd;
  double worst = 0;
  for (const conv_case& c : cases)
    for (unsigned threads : {1u, 2u})
      for (bool bias : {true, false}) {
        bk::host::queue q(threads);
        const conv_geometry g = conv_geometry::of(c.H, c.W, c.C, c.K, c.K, c.S, c.P);
        const std::size_t n = std::size_t(c.samples), O = std::size_t(c.O);
        const std::size_t nx = n * g.in_pixels() * std::size_t(c.C), ny = n * g.out_pixels() * O, nw = O * g.patch();
        std::vector<double> xd(nx), wd(nw), bd(O), dyd(ny), dwd(nw), dbd(O);
        for (auto* v : {&xd, &wd, &bd, &dyd, &dwd, &dbd})
          for (auto& e : *v) e = double(float(nd(gen)));  // values float holds exactly
        std::vector<float> x(xd.begin(), xd.end()), w(wd.begin(), wd.end()), b(bd.begin(), bd.end()),
            dy(dyd.begin(), dyd.end()), dw(dwd.begin(), dwd.end()), db(dbd.begin(), dbd.end()), y(ny, 9.f),
            dx(nx, 9.f), work(bk::conv2d_work_values(n, g));
        std::vector<double> yd(ny), dxd(nx), workd(work.size());

        bk::conv2d_forward(q, n, g, O, x.data(), w.data(), bias ? b.data() : nullptr, y.data(), work.data());
        bk::conv2d_forward(q, n, g, O, xd.data(), wd.data(), bias ? bd.data() : nullptr, yd.data(), workd.data());
        bk::conv2d_backward_weights(q, n, g, O, x.data(), dy.data(), dw.data(), bias ? db.data() : nullptr,
                                    work.data());
        bk::conv2d_backward_weights(q, n, g, O, xd.data(), dyd.data(), dwd.data(), bias ? dbd.data() : nullptr,
                                    workd.data());
        bk::conv2d_backward_data(q, n, g, O, dy.data(), w.data(), dx.data(), work.data());
        bk::conv2d_backward_data(q, n, g, O, dyd.data(), wd.data(), dxd.data(), workd.data());

        INFO(c.H << "x" << c.W << ", " << c.C << "->" << c.O << ", " << c.K << "x" << c.K << "/" << c.S << " pad "
                 << c.P << ", " << c.samples << " images, " << threads << " threads, bias " << bias);
        const double e[] = {rel_err(y, yd), rel_err(dw, dwd), rel_err(db, dbd), rel_err(dx, dxd)};
        CHECK(e[0] < 2e-6);  // sums of up to 7·7·64 float products
        CHECK(e[1] < 2e-6);
        CHECK(e[2] < 2e-6);
        CHECK(e[3] < 2e-6);
        for (double v : e) worst = std::max(worst, v);
      }
  MESSAGE("oneDNN float vs im2col float64: worst relative error " << worst << " over 8 shapes x 2 threads x bias");
  CHECK(bk::host::detail::dnnl_conv::runner::of_this_thread().workspace_bytes() > 0);
}

namespace {
using Down = Residual<Shortcut<Conv2d<8, 16, 1, 2, 0, false>, BatchNorm2d<16>>, Conv2d<8, 16, 3, 2, 1, false>,
                      BatchNorm2d<16>, ReLU, Conv2d<16, 16, 3, 1, 1>, BatchNorm2d<16>>;
template <class E>
using Net = Plan<Replicate<1, Conv2d<3, 8, 3, 1, 1>, BatchNorm2d<8>, ReLU, MaxPool2d<2>, Down, ReLU, GlobalAvgPool2d,
                           Linear<16, 10>>,
                 Input<12, 12, 3>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>, Element<E>>;
}  // namespace

TEST_CASE("a small ResNet's training steps in float on oneDNN equal float64") {
  auto w = local_world<Host>();
  auto t64 = make_trainer<Net<double>>(w, SGD{.lr = 0.1}, 3);
  auto t32 = make_trainer<Net<float>>(w, SGD{.lr = 0.1}, 3);
  auto p = t64.gather_parameters();
  for (auto& layer : p)  // start both from values float holds exactly
    for (auto& tensor : layer)
      for (auto& v : tensor) v = double(float(v));
  t64.set_parameters(p);
  t32.set_parameters(p);
  std::mt19937_64 g(5);
  std::normal_distribution<double> nd;
  std::vector<double> xd(8 * 12 * 12 * 3);
  for (auto& v : xd) v = double(float(nd(g)));
  std::vector<float> xf(xd.begin(), xd.end());
  std::vector<std::int32_t> y(8);
  for (auto& v : y) v = std::int32_t(g() % 10);
  double worst_loss = 0;
  for (int step = 0; step < 3; ++step) {
    const double l64 = t64.step(batch_view<double>{.inputs = xd, .labels = y, .samples = 8}).loss;
    const double l32 = t32.step(batch_view<float>{.inputs = xf, .labels = y, .samples = 8}).loss;
    CHECK(std::abs(l32 - l64) < 1e-5 * std::abs(l64));
    worst_loss = std::max(worst_loss, std::abs(l32 - l64) / std::abs(l64));
  }
  const auto a = t64.gather_parameters(), b = t32.gather_parameters();
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t k = 0; k < a[i].size(); ++k) {
      double d = 0, m = 0;
      for (std::size_t e = 0; e < a[i][k].size(); ++e) {
        d = std::max(d, std::abs(a[i][k][e] - b[i][k][e]));
        m = std::max(m, std::abs(a[i][k][e]));
      }
      INFO("layer " << i << " tensor " << k);
      CHECK(d / m < 1e-5);
      worst = std::max(worst, d / m);
    }
  MESSAGE("3 ResNet steps, oneDNN float vs float64: loss " << worst_loss << ", parameters " << worst);
}
