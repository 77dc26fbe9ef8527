// bf16 mixed precision: make_trainer<P, bf16> keeps bf16 activations and bf16 copies of
// the weights for the GEMMs, and FP32 master weights, gradients and optimizer state.
// The batch stays float. Here it trains next to a float32 trainer on the same data.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, Linear<16, 64>, GeLU, LayerNorm<64>, Linear<64, 4>>, Loss<SoftmaxCrossEntropy>,
               MicroBatch<32>, NumMicroBatch<2>>;

int main() {
  // The storage type: 8 significant bits, round to nearest even, exact widening.
  static_assert(sizeof(bf16) == 2);
  const bool rounds = float(bf16(1.0f + 1.0f / 256)) == 1.0f && float(bf16(3.140625f)) == 3.140625f;

  auto world = local_world<Host>();
  auto fp32 = make_trainer<P, float>(world, Adam{.lr = 1e-2}, /*seed=*/3);
  auto mixed = make_trainer<P, bf16>(world, Adam{.lr = 1e-2}, /*seed=*/3);  // same initial model

  std::mt19937 g(1);
  std::normal_distribution<float> nd;
  std::vector<float> x(64 * 16);  // master_t<bf16> is float: both trainers read this batch
  std::vector<std::int32_t> y(64);
  double worst = 0, first = 0, last = 0;
  for (int s = 0; s < 30; ++s) {
    for (std::size_t i = 0; i < 64; ++i) {
      float sum = 0;
      for (std::size_t k = 0; k < 16; ++k) sum += (x[i * 16 + k] = nd(g));
      y[i] = sum > 2 ? 3 : sum > 0 ? 2 : sum > -2 ? 1 : 0;  // a learnable label
    }
    const double a = fp32.step({.inputs = x, .labels = y, .samples = 64}).loss;
    const double b = mixed.step({.inputs = x, .labels = y, .samples = 64}).loss;
    worst = std::max(worst, std::abs(a - b) / a);
    if (s == 0) first = b;
    last = b;
  }
  std::printf("bf16 loss %.4f -> %.4f; worst relative difference to float32 %.2e\n", first, last, worst);

  // gather_parameters() reads the FP32 master weights.
  const auto w = mixed.gather_parameters();
  const bool masters = w[0][0].size() == 16 * 64;
  return rounds && masters && last < first && worst < 1e-2 ? 0 : 1;
}
