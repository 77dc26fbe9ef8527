// A user-defined layer that the planner places, shards around and costs, and that the
// executor runs: a learned per-feature shift, y = x + b. One header's worth of code:
// its description, the memory its execution needs, and forward/backward written with
// the kernel families (found by argument-dependent lookup, so it runs on every backend).
#include <array>
#include <cmath>
#include <cstdio>
#include <random>
#include <string_view>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

using namespace strata;

template <int D>
struct Shift {
  static constexpr std::string_view name = "Shift";
  // opaque: the planner knows nothing about how to cut it, so it gets whole features
  // (its input is gathered if it arrives feature-split) and whole parameters.
  static constexpr layer_role role = layer_role::opaque;
  static constexpr shape_t in_shape = shape_v<D>;  // the last dimension is checked
  static constexpr shape_t out_shape(shape_t in) { return in; }
  static constexpr std::array<param_t, 1> params{{{"shift", shape_v<D>, param_role::replicated, -1}}};
  static constexpr long long forward_flops(shape_t in) { return in.numel(); }
  static constexpr long long backward_flops(shape_t in) { return in.numel(); }  // the column sums
  // Backward needs nothing from forward: no stash, no scratch.
  static constexpr buffer_needs memory(const local_dims&) { return {}; }

  template <class C>
  static void forward(C& c) {  // y = x + b, row by row
    using T = typename C::value_type;
    bias_activation_forward(c.q, backend::activation::none, c.rows, c.in_cols, c.x, c.w[0], static_cast<T*>(nullptr),
                            c.y);
  }
  template <class C>
  static void backward(C& c) {  // db += Σ_rows dy; dx = dy
    bias_grad(c.q, c.rows, c.in_cols, c.dy, c.g[0], true);
    if (c.dx) copy(c.q, c.rows * c.in_cols, c.dy, c.dx);
  }
};

static_assert(Layer<Shift<512>> && ExecutableLayer<Shift<512>>);
static_assert(!Layer<int>);
static_assert(Layer<Linear<4, 4>> && Layer<SoftmaxCrossEntropy>);

using P = Plan<Split<4, Linear<256, 512>, Shift<512>, Linear<512, 16>>, Loss<SoftmaxCrossEntropy>, MicroBatch<8>>;

// The column-parallel output is gathered before the opaque layer...
static_assert(P::layer_plans[1].arrives == sbp::split_feature && P::layer_plans[1].in_layout == sbp::broadcast);
static_assert(P::layer_plans[1].comms[0].kind == collective::all_gather);
static_assert(P::layer_plans[1].local_params[0] == shape_v<512>);
// ...so the next Linear starts a new column-parallel pair.
static_assert(P::layer_plans[2].sig == signature::column_parallel);
// Shapes are checked against the user layer too: Shift<512> after Linear<256, 512> fits.
static_assert(P::layer_plans[1].in == shape_v<512> && P::layer_plans[1].out == shape_v<512>);
// Costs come from the layer's own functions.
static_assert(P::flops_per_replica_step() > 0);

// On one device it trains like any built-in layer.
using One = Plan<Replicate<1, Linear<8, 16>, Shift<16>, ReLU, Linear<16, 3>>, Loss<SoftmaxCrossEntropy>, MicroBatch<32>>;

int main() {
  auto world = local_world<Host>();
  auto train = make_trainer<One, double>(world, Adam{.lr = 1e-2}, /*seed=*/1);
  std::mt19937 g(5);
  std::normal_distribution<double> nd;
  std::vector<double> x(32 * 8);
  std::vector<std::int32_t> y(32);
  double first = 0, last = 0;
  for (int step = 0; step < 50; ++step) {
    for (auto& v : x) v = nd(g);
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = x[i * 8] > 0 ? (x[i * 8 + 1] > 0 ? 2 : 1) : 0;
    const double loss = train.step({.inputs = x, .labels = y, .samples = 32}).loss;
    if (step == 0) first = loss;
    last = loss;
  }
  // the shift is trained too (it starts from the plan's initialisation, U(±1/√16))
  const auto shift = train.gather_parameters()[1][0];
  double size = 0;
  for (double v : shift) size += std::abs(v);
  std::printf("loss %.3f -> %.3f, Σ|shift| %.3f\n", first, last, size);
  return last < 0.7 * first ? 0 : 1;
}
