// requires: nccl
// Whole training steps on the CUDA backend against the host backend (same plan, seed
// and data) in float64, float32 and bf16 mixed precision, graph replay against eager
// launches, batches already in device memory against host batches, Dropout's masks and
// attention dropout's under graph replay, and no cudaMalloc once training runs.
// Exits 77 (skipped) without a GPU.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <strata/runtime/cuda_world.hpp>
#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
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

// Trains P for `steps` on the GPU in T and on the host in H (default T); returns the
// worst relative difference of the loss (per step) and of the parameters (at the end).
// Both read the same float values (the batch is made in the GPU run's master type).
template <class P, class T, class H = T>
std::pair<double, double> gpu_vs_host(optimizer opt, int steps, int vocab = 0, bool graphs = true) {
  auto gw = cuda_local_world();
  auto hw = local_world<Host>();
  auto g = make_trainer<P, T>(gw, opt, 5);
  auto h = make_trainer<P, H>(hw, opt, 5);
  g.use_graphs(graphs);
  constexpr std::size_t samples = P::micro_batch * P::num_micro_batch;
  constexpr std::size_t in = static_cast<std::size_t>(P::input_shape.numel());
  const auto& ll = P::layer_plans[P::num_layers - 1];
  const int classes = ll.in.last();
  const std::size_t per = static_cast<std::size_t>(ll.in.numel() / ll.in.last());
  std::vector<master_t<T>> x;
  std::vector<master_t<H>> xh;
  std::vector<std::int32_t> y;
  double worst_loss = 0;
  for (int s = 0; s < steps; ++s) {
    make_batch<master_t<T>>(s, samples, in, classes, vocab, x, y);
    y.resize(samples * per);
    for (std::size_t i = samples; i < y.size(); ++i) y[i] = y[i % samples];
    xh.assign(x.begin(), x.end());
    const auto a = g.step({.inputs = x, .labels = y, .samples = samples});
    const auto b = h.step({.inputs = xh, .labels = y, .samples = samples});
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
// bf16: GeLU rather than ReLU (a gate flipped by a rounding difference moves whole
// gradient rows in small batches); ids up to 999 are not integers in bf16.
using MLP_G = Plan<Replicate<1, Linear<32, 64>, GeLU, Linear<64, 64>, GeLU, LayerNorm<64>, Linear<64, 10>>, CE,
                   MicroBatch<16>, NumMicroBatch<4>>;
using EMB_BIG = Plan<Replicate<1, Embedding<1000, 16>, LayerNorm<16>, Linear<16, 8>>, Input<4>, CE, MicroBatch<8>>;
using CHUNKS_G = Plan<Pipeline<Replicate<1, Linear<32, 64>, GeLU>, Replicate<1, Linear<64, 10>>>, CE, MicroBatch<8>,
                      NumMicroBatch<4>, Schedule<Interleaved<2>>>;
// MoE (layers/moe.hpp): routing, capacity dropping (75%) and the load-balancing loss on
// the GPU's kernels (backend/cuda/moe.cuh) against the host's
using MOE = Plan<Replicate<1, Linear<32, 16>, Residual<LayerNorm<16>, MoE<4, 16, 32, 2, 75>>, Linear<16, 10>>, CE,
                 MicroBatch<16>, NumMicroBatch<2>>;

// Dropout (layers/dropout.hpp) after a GeLU and after a Linear: the step's key lives in
// device memory, so a replayed graph draws each step's own masks
using DROP = Plan<Replicate<1, Linear<32, 64>, GeLU, Dropout<20>, Linear<64, 64>, Dropout<10>, LayerNorm<64>,
                             Linear<64, 10>>,
                  CE, MicroBatch<16>, NumMicroBatch<4>>;

// Attention dropout inside the flash kernels (a Llama block, grouped-query, and a GPT block):
// the GPU's kernels recompute the host's masks in the backward, each replayed step its own
using ATTN_DROP = Plan<Replicate<1, Embedding<50, 32>, PositionEmbedding<16, 32>,
                                Residual<RMSNorm<32>, LlamaAttention<32, 4, 2, 16, 10000, 20>>,
                                Residual<LayerNorm<32>, CausalSelfAttention<32, 4, 16, 0, 10>>, LayerNorm<32>,
                                Linear<32, 50>>,
                       Input<16>, CE, MicroBatch<4>, NumMicroBatch<2>>;

// three TaskGraphs: offloaded weights brought in on the copy stream ahead of their use;
// ZeRO-3's staging and gradient slots (a world of one: no collective, the same buffers)
template <class... O>
using THREE = Plan<Colocate<Replicate<1, Linear<32, 64>, GeLU>, Replicate<1, Linear<64, 64>, GeLU>,
                            Replicate<1, LayerNorm<64>, Linear<64, 10>>>,
                   CE, MicroBatch<16>, NumMicroBatch<2>, O...>;

}  // namespace

TEST_CASE("offload, weights cast per use and ZeRO-2/3 on the GPU match the host backend") {
  const auto [l1, p1] = gpu_vs_host<THREE<Offload<offload_level::weights_and_state>, ApplyGroups<2>>, double>(
      Adam{.lr = 1e-2}, 6, 0, false);
  MESSAGE("offloaded weights + state (copy stream) float64: loss " << l1 << ", params " << p1);
  CHECK(l1 < 1e-10);
  CHECK(p1 < 1e-10);
  const auto [l2, p2] = gpu_vs_host<THREE<Zero<3>>, double>(Adam{.lr = 1e-2}, 6, 0, false);
  MESSAGE("Zero<3> float64: loss " << l2 << ", params " << p2);
  CHECK(l2 < 1e-10);
  CHECK(p2 < 1e-10);
  const auto [l3, p3] = gpu_vs_host<THREE<Zero<2>, CastWeightsPerUse>, bf16>(SGD{.lr = 0.05}, 6, 0, false);
  MESSAGE("Zero<2> bf16 weights cast per use: loss " << l3 << ", params " << p3);
  CHECK(l3 < 1e-2);
  CHECK(p3 < 1e-2);
}

TEST_CASE("an MoE layer's steps on the GPU match the host backend") {
  const auto [l, p] = gpu_vs_host<MOE, double>(Adam{.lr = 1e-2}, 10);
  MESSAGE("MoE float64 Adam: worst loss rel " << l << ", worst param rel " << p);
  CHECK(l < 1e-10);
  CHECK(p < 1e-10);
  const auto [lf, pf] = gpu_vs_host<MOE, float>(SGD{.lr = 0.05}, 10);
  MESSAGE("MoE float32 SGD: worst loss rel " << lf << ", worst param rel " << pf);
  CHECK(lf < 1e-4);
  CHECK(pf < 1e-4);
}

TEST_CASE("float64 steps on the GPU match the host backend") {
  const auto [l, p] = gpu_vs_host<MLP, double>(SGD{.lr = 0.05, .momentum = 0.9}, 10);
  MESSAGE("MLP float64 SGD: worst loss rel " << l << ", worst param rel " << p);
  CHECK(l < 1e-10);
  CHECK(p < 1e-10);
}

// A small ResNet: convolutions (cuDNN's where strata::cudnn is linked, as the CMake build
// does when it finds cuDNN; else im2col and GEMMs), max and average pooling, batch norm with
// its running statistics, a projection shortcut.
using RESNET = Plan<Replicate<1, Conv2d<2, 8, 3, 1, 1, false>, BatchNorm2d<8>, ReLU, MaxPool2d<2>,
                              Residual<Shortcut<Conv2d<8, 16, 1, 2, 0, false>, BatchNorm2d<16>>,
                                       Conv2d<8, 16, 3, 2, 1, false>, BatchNorm2d<16>, ReLU,
                                       Conv2d<16, 16, 3, 1, 1, false>, BatchNorm2d<16>>,
                              ReLU, AvgPool2d<3, 1, 1>, GlobalAvgPool2d, Linear<16, 10>>,
                    CE, Input<12, 12, 2>, MicroBatch<4>, NumMicroBatch<2>>;

TEST_CASE("a small ResNet's steps on the GPU match the host backend (float64 and float32)") {
  const auto [l, p] = gpu_vs_host<RESNET, double>(Adam{.lr = 1e-2}, 5);
  MESSAGE("ResNet float64 Adam: worst loss rel " << l << ", worst param rel " << p);
  CHECK(l < 1e-10);
  CHECK(p < 1e-10);
  const auto [lf, pf] = gpu_vs_host<RESNET, float>(SGD{.lr = 0.05}, 5, 0, false);
  MESSAGE("ResNet float32 SGD: worst loss rel " << lf << ", worst param rel " << pf);
  CHECK(lf < 1e-4);
  CHECK(pf < 1e-4);
}

TEST_CASE("Dropout on the GPU draws the host's masks, a replayed graph each step's own") {
  const auto [l, p] = gpu_vs_host<DROP, double>(Adam{.lr = 1e-2}, 6);
  MESSAGE("Dropout float64 Adam (graphs from step 2): worst loss rel " << l << ", worst param rel " << p);
  CHECK(l < 1e-10);
  CHECK(p < 1e-10);
  const auto [lb, pb] = gpu_vs_host<DROP, bf16>(SGD{.lr = 0.05}, 6);
  MESSAGE("Dropout bf16 SGD, GPU vs host bf16: worst loss rel " << lb << ", worst param rel " << pb);
  CHECK(lb < 5e-3);
  CHECK(pb < 2e-2);
}

TEST_CASE("attention dropout on the GPU draws the host's masks, a replayed graph each step's own") {
  const auto [l, p] = gpu_vs_host<ATTN_DROP, double>(Adam{.lr = 1e-2}, 6, 50);
  MESSAGE("attention dropout float64 Adam (graphs from step 2): worst loss rel " << l << ", worst param rel " << p);
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
    const auto a = eager.step({.inputs = x, .labels = y, .samples = 64});
    const auto b = graphs.step({.inputs = x, .labels = y, .samples = 64});
    CHECK(std::abs(a.loss - b.loss) <= 1e-6 * std::abs(a.loss));
    if (s == 2) mallocs_after_warmup = backend::cuda::malloc_count();
  }
  CHECK(backend::cuda::malloc_count() == mallocs_after_warmup);
}

// bf16 on both sides: the same roundings except where device expf/tanhf and cuBLASLt's
// FP32 summation order differ by an ulp, which a bf16 rounding can turn into one bf16
// ulp (2^-8): the runs drift apart at bf16 accuracy, not more. The host bf16 run itself
// is checked against float64 in tests/unit/test_mixed_precision.cpp.
TEST_CASE("bf16 mixed-precision steps match the host backend's bf16 steps") {
  const auto [l, p] = gpu_vs_host<MLP_G, bf16>(Adam{.lr = 1e-3}, 10);
  MESSAGE("MLP bf16 Adam, GPU vs host bf16: worst loss rel " << l << ", worst param rel " << p);
  CHECK(l < 5e-3);
  CHECK(p < 2e-2);
  const auto [l2, p2] = gpu_vs_host<MLP_G, bf16, double>(SGD{.lr = 0.05, .momentum = 0.9}, 10);
  MESSAGE("MLP bf16 SGD, GPU vs host float64: worst loss rel " << l2 << ", worst param rel " << p2);
  CHECK(l2 < 5e-3);
  CHECK(p2 < 2e-2);
  const auto [l3, p3] = gpu_vs_host<EMB_BIG, bf16, double>(AdamW{.lr = 1e-3}, 10, 1000);
  MESSAGE("Embedding<1000> bf16 AdamW, GPU vs host float64: worst loss rel " << l3 << ", worst param rel " << p3);
  CHECK(l3 < 5e-3);
  CHECK(p3 < 2e-2);
  const auto [l4, p4] = gpu_vs_host<CHUNKS_G, bf16, double>(SGD{.lr = 0.05}, 10);
  CHECK(l4 < 5e-3);
  CHECK(p4 < 2e-2);
}

TEST_CASE("a batch already in device memory trains like the same batch from the host") {
  auto w = cuda_local_world();
  auto from_host = make_trainer<MLP, float>(w, SGD{.lr = 0.05}, 5);
  auto from_device = make_trainer<MLP, float>(w, SGD{.lr = 0.05}, 5);
  auto mixed = make_trainer<MLP_G, bf16>(w, SGD{.lr = 0.05}, 5);
  std::vector<float> x;
  std::vector<std::int32_t> y;
  backend::cuda::buffer<float> dx(64 * 32);
  backend::cuda::buffer<std::int32_t> dy(64);
  const batch_view<float> on_device{.inputs = {dx.data(), dx.size()}, .labels = {dy.data(), dy.size()}, .samples = 64};
  std::size_t mallocs_after_warmup = 0;
  for (int s = 0; s < 6; ++s) {
    make_batch<float>(s, 64, 32, 10, 0, x, y);
    REQUIRE(cudaMemcpy(dx.data(), x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaMemcpy(dy.data(), y.data(), y.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice) == cudaSuccess);
    const auto a = from_host.step({.inputs = x, .labels = y, .samples = 64});
    const auto b = from_device.step(on_device);
    CHECK(a.loss == b.loss);  // the same device work on the same values
    CHECK(a.correct == b.correct);
    CHECK(std::isfinite(mixed.step(on_device).loss));
    if (s == 2) mallocs_after_warmup = backend::cuda::malloc_count();
  }
  CHECK(backend::cuda::malloc_count() == mallocs_after_warmup);  // bf16 graphs allocate nothing either
  const auto pa = from_host.gather_parameters(), pb = from_device.gather_parameters();
  for (std::size_t i = 0; i < pa.size(); ++i)
    for (std::size_t k = 0; k < pa[i].size(); ++k) CHECK(pa[i][k] == pb[i][k]);

  // bad values in a device batch are found before any work, with the host's messages
  x[100] = std::nanf("");
  REQUIRE(cudaMemcpy(dx.data(), x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK_THROWS_WITH(from_device.step(on_device), doctest::Contains("NaN or Inf"));
  x[100] = 0.5f;
  y[7] = 12;
  REQUIRE(cudaMemcpy(dx.data(), x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(dy.data(), y.data(), y.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK_THROWS_WITH(from_device.step(on_device), doctest::Contains("label 12 at position 7"));
  CHECK_THROWS_WITH(from_device.step({.inputs = on_device.inputs, .labels = y, .samples = 64}),
                    doctest::Contains("both be in host memory"));
}

TEST_CASE("the public verifier on one GPU: two interleaved chunks against the one-device reference") {
  // a world of one GPU: both runs on the device, the reference in float64
  auto w = cuda_local_world();
  const verify::report r = verify::against_one_device<CHUNKS, double>(w, Adam{.lr = 1e-2}, 5,
                                                                      verify::random_data<CHUNKS>(), 1e-9);
  std::printf("%s", r.text().c_str());
  CHECK(r.ok());
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
