// ResNet-50 (examples/resnet/resnet50.hpp, torchvision's resnet50) trained on the host
// backend, one process, float32, SGD with momentum 0.9 and weight decay 1e-4 (torchvision's
// recipe): the time of a full training step — forward, backward, update — on one fixed batch
// of random images, the same protocol as pytorch_resnet.py: `warm-up` steps, then the
// median of `steps` timed steps.
//   bench_resnet <threads> [steps (5)] [batch: 8 | 16 (8)] [image size: 224 | 112 (224)] [warm-up (2)]
// Prints `BLAS: <OpenBLAS config>, kernels for <core>` (OPENBLAS_CORETYPE=SkylakeX picks its
// AVX-512 kernels where the library does not know the CPU), then `strata resnet50 batch <B>
// image <S> threads <T> <median ms> ms/step <images/s> images/s (min <ms>, loss <l>)`. Built
// with strata::dnnl (bench_resnet_dnnl) the convolutions run on oneDNN: `oneDNN: <version>`
// and `strata-onednn resnet50 ...`.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <strata/runtime/trainer.hpp>
#if defined(STRATA_WITH_DNNL)
#include <oneapi/dnnl/dnnl.hpp>
constexpr const char* label = "strata-onednn";
#else
constexpr const char* label = "strata";
#endif

#include "resnet/resnet50.hpp"

using namespace strata;

template <int B, int S>
int run(unsigned threads, int steps, int warmup) {
  using P = resnet50::Plan<B, S>;
  auto world = local_world<Host>();
  world.queue().set_threads(threads);
  auto train = make_trainer<P>(world, SGD{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4});
  std::mt19937 g(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(B) * S * S * 3);
  std::vector<std::int32_t> y(B);
  for (auto& v : x) v = nd(g);
  for (auto& v : y) v = std::int32_t(g() % 1000);
  const batch_view<float> batch{.inputs = x, .labels = y, .samples = std::size_t(B)};
  for (int i = 0; i < warmup; ++i) train.step(batch);
  std::vector<double> ms;
  double loss = 0;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    loss = train.step(batch).loss;
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms.size() % 2 ? ms[ms.size() / 2] : (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]) / 2;
  std::printf("%s resnet50 batch %d image %d threads %u %.1f ms/step %.2f images/s (min %.1f, loss %.3f)\n", label, B,
              S, threads, med, B / med * 1e3, ms.front(), loss);
  std::fflush(stdout);
  return 0;
}

int main(int argc, char** argv) {
  const unsigned threads = argc > 1 ? static_cast<unsigned>(std::atoi(argv[1])) : 1u;
  const int steps = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  const int batch = argc > 3 ? std::atoi(argv[3]) : 8;
  const int size = argc > 4 ? std::atoi(argv[4]) : 224;
  const int warmup = argc > 5 ? std::atoi(argv[5]) : 2;
  std::printf("BLAS: %s, kernels for %s\n", openblas_get_config(), openblas_get_corename());
#if defined(STRATA_WITH_DNNL)
  std::printf("oneDNN: %d.%d.%d\n", dnnl_version()->major, dnnl_version()->minor, dnnl_version()->patch);
#endif
  if (batch == 8 && size == 224) return run<8, 224>(threads, steps, warmup);
  if (batch == 16 && size == 224) return run<16, 224>(threads, steps, warmup);
  if (batch == 8 && size == 112) return run<8, 112>(threads, steps, warmup);
  if (batch == 16 && size == 112) return run<16, 112>(threads, steps, warmup);
  std::fprintf(stderr, "bench_resnet: batch 8 or 16, image size 224 or 112\n");
  return 2;
}
