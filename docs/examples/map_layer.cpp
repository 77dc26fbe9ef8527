// A layer with its own per-element math and no kernel of its own: SquarePlus,
// y = (x + √(x² + 4)) / 2, a smooth ReLU. Its forward and backward are STRATA_HD functors
// that backend::map runs on every backend (host threads here; a CUDA kernel on GPUs).
// The whole extension is this one type.
#include <array>
#include <cmath>
#include <cstdio>
#include <random>
#include <string_view>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

using namespace strata;

struct square_plus_fwd {
  template <class C>
  STRATA_HD C operator()(C x) const {
    return (x + sqrt(x * x + C(4))) / C(2);
  }
};
struct square_plus_bwd {  // dx = dy · (1 + x / √(x² + 4)) / 2
  template <class C>
  STRATA_HD C operator()(C x, C dy) const {
    return dy * (C(1) + x / sqrt(x * x + C(4))) / C(2);
  }
};

struct SquarePlus {
  static constexpr std::string_view name = "SquarePlus";
  // elementwise: any layout passes through it, so it shards like ReLU
  static constexpr layer_role role = layer_role::elementwise;
  static constexpr shape_t in_shape{};
  static constexpr shape_t out_shape(shape_t in) { return in; }
  static constexpr std::array<param_t, 0> params{};
  static constexpr long long forward_flops(shape_t in) { return 5 * in.numel(); }
  static constexpr long long backward_flops(shape_t in) { return 6 * in.numel(); }
  static constexpr buffer_needs memory(const local_dims&) { return {.keep_input = true}; }  // x, for backward

  template <class C>
  static void forward(C& c) {
    map(c.q, c.rows * c.in_cols, square_plus_fwd{}, c.y, c.x);
  }
  template <class C>
  static void backward(C& c) {
    if (c.dx) map(c.q, c.rows * c.in_cols, square_plus_bwd{}, c.dx, c.x, c.dy);
  }
};
static_assert(Layer<SquarePlus> && ExecutableLayer<SquarePlus>);

int main() {
  // The backward functor is the forward's derivative: central differences through map.
  backend::host::queue q;
  const std::vector<double> x{-3.0, -0.5, 0.0, 0.7, 2.5};
  const double h = 1e-6;
  std::vector<double> xp(x), xm(x), yp(x.size()), ym(x.size()), ones(x.size(), 1.0), dx(x.size());
  for (auto& v : xp) v += h;
  for (auto& v : xm) v -= h;
  backend::map(q, x.size(), square_plus_fwd{}, yp.data(), static_cast<const double*>(xp.data()));
  backend::map(q, x.size(), square_plus_fwd{}, ym.data(), static_cast<const double*>(xm.data()));
  backend::map(q, x.size(), square_plus_bwd{}, dx.data(), x.data(), static_cast<const double*>(ones.data()));
  for (std::size_t i = 0; i < x.size(); ++i)
    if (std::abs((yp[i] - ym[i]) / (2 * h) - dx[i]) > 1e-8) return std::printf("derivative wrong at %zu\n", i), 1;

  // It plans and trains like a built-in activation: between two column/row-parallel
  // Linears it takes the split layout, with no collective of its own.
  using Tp = Plan<Split<2, Linear<8, 16>, SquarePlus, Linear<16, 3>>, Loss<SoftmaxCrossEntropy>, MicroBatch<8>>;
  static_assert(Tp::layer_plans[1].arrives == sbp::split_feature && Tp::layer_plans[1].num_comms == 0);

  using One = Plan<Replicate<1, Linear<8, 16>, SquarePlus, Linear<16, 3>>, Loss<SoftmaxCrossEntropy>, MicroBatch<32>>;
  auto world = local_world<Host>();
  auto train = make_trainer<One, double>(world, Adam{.lr = 1e-2}, /*seed=*/1);
  std::mt19937 g(5);
  std::normal_distribution<double> nd;
  std::vector<double> in(32 * 8);
  std::vector<std::int32_t> labels(32);
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    for (auto& v : in) v = nd(g);
    for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = in[i * 8] > 0 ? (in[i * 8 + 1] > 0 ? 2 : 1) : 0;
    const double loss = train.step({.inputs = in, .labels = labels, .samples = 32}).loss;
    if (step == 0) first = loss;
    last = loss;
  }
  std::printf("SquarePlus: loss %.3f -> %.3f\n", first, last);
  return last < 0.7 * first ? 0 : 1;
}
