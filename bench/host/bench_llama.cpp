// A Llama-style decoder trained on the host backend, one process, float32, AdamW: an
// Embedding tied to the output head (TiedHead), pre-RMSNorm blocks of grouped-query causal
// attention with rotary positions (LlamaAttention: no biases) and SwiGLU, final RMSNorm.
// Two shapes, the same as pytorch_llama.py's configs: "main" (the main job's model: vocab
// 2048, context 128, D 128, 4 heads over 2 key/value heads, SwiGLU 352, 4 blocks) at 8, 16
// and 32 sequences per step, and "wide" (vocab 4096, context 512, D 512, 8 heads over 2,
// SwiGLU 1408, 2 blocks) at 2 and 4. Tokens/s of a full training step: a warm-up, then
// the mean of full steps on one fixed batch. `bench_llama <threads> [steps]`.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

using namespace strata;

template <int V, int S, int D, int H, int KV, int Hidden, int Blocks, int B>
using Llama = Plan<Replicate<1, Embedding<V, D>,
                             Repeat<Blocks, Residual<RMSNorm<D>, LlamaAttention<D, H, KV, S>>, Residual<RMSNorm<D>, SwiGLU<D, Hidden>>>,
                             RMSNorm<D>, TiedHead<V, D>>,
                   Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<B>>;

template <class P>
void run(const char* config, unsigned threads, int steps, int warmup) {
  constexpr int S = int(P::input_elems), B = int(P::replica_batch), V = int(P::vocabulary);
  auto world = local_world<Host>();
  world.queue().set_threads(threads);
  auto train = make_trainer<P>(world, AdamW{.lr = 1e-3, .weight_decay = 0.01});
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
  std::printf("strata %s sequences %d threads %u %.3f ms/step %.0f tokens/s (loss %.3f)\n", config, B, threads, ms,
              double(B) * S / ms * 1e3, loss);
  std::fflush(stdout);
}

int main(int argc, char** argv) {
  const unsigned threads = argc > 1 ? static_cast<unsigned>(std::atoi(argv[1])) : 1u;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 20;
  run<Llama<2048, 128, 128, 4, 2, 352, 4, 8>>("main", threads, steps, 3);
  run<Llama<2048, 128, 128, 4, 2, 352, 4, 16>>("main", threads, steps, 3);
  run<Llama<2048, 128, 128, 4, 2, 352, 4, 32>>("main", threads, steps, 3);
  run<Llama<4096, 512, 512, 8, 2, 1408, 2, 2>>("wide", threads, std::max(2, steps / 5), 1);
  run<Llama<4096, 512, 512, 8, 2, 1408, 2, 4>>("wide", threads, std::max(2, steps / 5), 1);
}
