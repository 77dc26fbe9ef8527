// The GPT of the main job (4 pre-LN blocks, D 128, 4 heads, context 128, byte
// vocabulary) trained on the host backend, one process, float32, AdamW: tokens/s of a
// full training step at 8, 16 and 32 sequences per step, the same model and protocol as
// pytorch_gpt.py (warm-up, then the mean of full steps on one fixed batch); and the same
// model at a context of 2048 (flash attention's regime), 1 and 2 sequences per step.
// `bench_gpt <threads> [steps]`.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

using namespace strata;

constexpr int V = 256, D = 128, H = 4, Blocks = 4;
template <int S>
using Attn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>;
using MLP = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;
template <int B, int S = 128>
using GPT = Plan<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, Repeat<Blocks, Attn<S>, MLP>, LayerNorm<D>,
                           Linear<D, V>>,
                 Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<B>>;

template <int B, int S = 128>
void run(unsigned threads, int steps, int warmup) {
  auto world = local_world<Host>();
  world.queue().set_threads(threads);
  auto train = make_trainer<GPT<B, S>>(world, AdamW{.lr = 1e-3, .weight_decay = 0.01});
  std::mt19937 g(1);
  std::vector<float> x(static_cast<std::size_t>(S) * B);
  std::vector<std::int32_t> y(static_cast<std::size_t>(S) * B);
  for (auto& v : x) v = float(g() % V);
  for (auto& v : y) v = std::int32_t(g() % V);
  const batch_view<float> batch{.inputs = x, .labels = y, .samples = std::size_t(B)};
  for (int i = 0; i < warmup; ++i) train.step(batch);
  const auto t0 = std::chrono::steady_clock::now();
  double loss = 0;
  for (int i = 0; i < steps; ++i) loss = train.step(batch).loss;
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps;
  std::printf("strata sequences %d threads %u %.3f ms/step %.0f tokens/s (loss %.3f)%s\n", B, threads, ms,
              double(B) * S / ms * 1e3, loss, S != 128 ? (" context " + std::to_string(S)).c_str() : "");
  std::fflush(stdout);
}

int main(int argc, char** argv) {
  const unsigned threads = argc > 1 ? static_cast<unsigned>(std::atoi(argv[1])) : 1u;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 20;
  run<8>(threads, steps, 3);
  run<16>(threads, steps, 3);
  run<32>(threads, steps, 3);
  run<1, 2048>(threads, std::max(2, steps / 5), 1);
  run<2, 2048>(threads, std::max(2, steps / 5), 1);
}
