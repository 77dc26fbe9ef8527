// requires: nccl
// Whole training steps on the CUDA backend against the host backend (same plan, seed
// and data), graph replay against eager launches, and no cudaMalloc once training runs.
// Exits 77 (skipped) without a GPU.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <strata/runtime/cuda_world.hpp>
#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

using namespace strata;

namespace {

template <class T>
void make_batch(int step, std::size_t samples, std::size_t in, int classes, int vocab, std::vector<T>& x,
                std::vector<std::int32_t>& y) {
  std::mt19937_64 g(99 + static_cast<unsigned>(step));
  std::normal_distribution<double> nd;
  x.resize(samples * in);
  y.resize(samples);
  for (auto& v : x) v = vocab ? static_cast<T>(g() % static_cast<unsigned>(vocab)) : static_cast<T>(nd(g));
  for (auto& v : y) v = static_cast<std::int32_t>(g() % static_cast<unsigned>(classes));
}

double rel(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// Trains P for `steps` on the GPU and on the host; returns the worst relative
// difference of the loss (per step) and of the parameters (at the end).
template <class P, class T>
std::pair<double, double> gpu_vs_host(optimizer opt, int steps, int vocab = 0, bool graphs = true) {
  auto gw = cuda_local_world();
  auto hw = local_world<Host>();
  auto g = make_trainer<P, T>(gw, opt, 5);
  auto h = make_trainer<P, T>(hw, opt, 5);
  g.use_graphs(graphs);
  constexpr std::size_t samples = P::micro_batch * P::num_micro_batch;
  constexpr std::size_t in = static_cast<std::size_t>(P::input_shape.numel());
  const int classes = P::layer_plans[P::num_layers - 1].in.last();
  std::vector<T> x;
  std::vector<std::int32_t> y;
  double worst_loss = 0;
  for (int s = 0; s < steps; ++s) {
    make_batch<T>(s, samples, in, classes, vocab, x, y);
    const auto a = g.step({x.data(), y.data(), samples, in, 1});
    const auto b = h.step({x.data(), y.data(), samples, in, 1});
    worst_loss = std::max(worst_loss, std::abs(a.loss - b.loss) / std::abs(b.loss));
  }
  const auto pa = g.gather_parameters(), pb = h.gather_parameters();
  double worst_param = 0;
  for (std::size_t i = 0; i < pa.size(); ++i)
    for (std::size_t k = 0; k < pa[i].size(); ++k) worst_param = std::max(worst_param, rel(pa[i][k], pb[i][k]));
  return {worst_loss, worst_param};
}

using CE = Loss<SoftmaxCrossEntropy>;
using MLP = Plan<Replicate<1, Linear<32, 64>, ReLU, Linear<64, 64>, GeLU, LayerNorm<64>, Linear<64, 10>>, CE,
                 MicroBatch<16>, NumMicroBatch<4>>;
using CHUNKS = Plan<Pipeline<Replicate<1, Linear<32, 64>, ReLU>, Replicate<1, Linear<64, 10>>>, CE, MicroBatch<8>,
                    NumMicroBatch<4>, Schedule<Interleaved<2>>>;  // two chunks on one GPU
using EMB = Plan<Replicate<1, Embedding<100, 16>, LayerNorm<16>, Linear<16, 8>>, Input<4>, CE, MicroBatch<8>>;

}  // namespace

TEST_CASE("float64 steps on the GPU match the host backend") {
  const auto [l, p] = gpu_vs_host<MLP, double>(SGD{.lr = 0.05, .momentum = 0.9}, 10);
  MESSAGE("MLP float64 SGD: worst loss rel " << l << ", worst param rel " << p);
  CHECK(l < 1e-10);
  CHECK(p < 1e-10);
}

TEST_CASE("float32 steps (exact fp32 GEMMs, no TF32) match the host within 1e-4") {
  const auto [l, p] = gpu_vs_host<MLP, float>(Adam{.lr = 1e-3}, 10);
  MESSAGE("MLP float32 Adam: worst loss rel " << l << ", worst param rel " << p);
  CHECK(l < 1e-4);
  CHECK(p < 1e-4);
  const auto [l2, p2] = gpu_vs_host<CHUNKS, float>(SGD{.lr = 0.05}, 10);
  CHECK(l2 < 1e-4);
  CHECK(p2 < 1e-4);
  const auto [l3, p3] = gpu_vs_host<EMB, float>(AdamW{.lr = 1e-3}, 10, 100);
  CHECK(l3 < 1e-4);
  CHECK(p3 < 1e-4);
}

TEST_CASE("replayed graphs compute what eager launches compute, with no cudaMalloc") {
  auto w = cuda_local_world();
  auto eager = make_trainer<MLP, float>(w, SGD{.lr = 0.05}, 5);
  auto graphs = make_trainer<MLP, float>(w, SGD{.lr = 0.05}, 5);
  eager.use_graphs(false);
  std::vector<float> x;
  std::vector<std::int32_t> y;
  std::size_t mallocs_after_warmup = 0;
  for (int s = 0; s < 8; ++s) {
    make_batch<float>(s, 64, 32, 10, 0, x, y);
    const auto a = eager.step({x.data(), y.data(), 64, 32, 1});
    const auto b = graphs.step({x.data(), y.data(), 64, 32, 1});
    CHECK(std::abs(a.loss - b.loss) <= 1e-6 * std::abs(a.loss));
    if (s == 2) mallocs_after_warmup = backend::cuda::malloc_count();
  }
  CHECK(backend::cuda::malloc_count() == mallocs_after_warmup);
}

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: skipping\n");
    return 77;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
