// The seed MLP's training step on the host backend (one process, float32, Adam lr
// 1e-3): Flatten, 784-512 ReLU, 512-512 ReLU, 512-10, softmax cross-entropy, at batch
// 64, 256 and 1024 — the same model and protocol as pytorch_mlp.py (warm-up, then the
// mean of full steps on one fixed batch). `bench_step <threads> [steps]`.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

using namespace strata;

template <int B>
using MLP = Plan<Replicate<1, Flatten, Linear<784, 512>, ReLU, Linear<512, 512>, ReLU, Linear<512, 10>>,
                 Input<1, 28, 28>, Loss<SoftmaxCrossEntropy>, MicroBatch<B>>;

template <int B>
void run(unsigned threads, int steps, int warmup) {
  auto world = local_world<Host>();
  world.queue().set_threads(threads);
  auto train = make_trainer<MLP<B>>(world, Adam{.lr = 1e-3});
  std::mt19937 g(1);
  std::normal_distribution<float> nd;
  std::vector<float> x(784 * static_cast<std::size_t>(B));
  std::vector<std::int32_t> y(B);
  for (auto& v : x) v = nd(g);
  for (auto& v : y) v = static_cast<std::int32_t>(g() % 10);
  const batch_view<float> batch{.inputs = x, .labels = y, .samples = std::size_t(B)};
  for (int i = 0; i < warmup; ++i) train.step(batch);
  const int n = std::max(steps, steps * 256 / B);  // small batches: more steps
  const auto t0 = std::chrono::steady_clock::now();
  double loss = 0;
  for (int i = 0; i < n; ++i) loss = train.step(batch).loss;
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / n;
  std::printf("strata batch %d threads %u %.4f ms/step %.0f samples/s (loss %.3f)\n", B, threads, ms, B / ms * 1e3,
              loss);
  std::fflush(stdout);
}

int main(int argc, char** argv) {
  const unsigned threads = argc > 1 ? static_cast<unsigned>(std::atoi(argv[1])) : 1u;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 50;
  run<64>(threads, steps, 10);
  run<256>(threads, steps, 10);
  run<1024>(threads, steps, 10);
}
