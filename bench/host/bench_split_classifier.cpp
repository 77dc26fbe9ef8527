// EPL's reason for the split classifier (EPL 1.2.3 / 5.3.1): a small ResNet body replicated
// over the world's devices beside a 100,000-class classifier split over the same devices
// (Colocate<Replicate<N, body>, Split<N, head>>), against the same layers all replicated
// (Replicate<N, body, head>). Per device: the plan's memory (parameters, gradients, Adam
// state, activations) and the measured step time (float32, Adam, mean after warm-up).
//
//   mpiexec -n 4 bench_host_split_classifier [steps]     (bench/host/run_split_classifier.sh)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "resnet/resnet18.hpp"
#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

using namespace strata;
using examples::resnet::basic_stage;

namespace {

constexpr int N = 4, Classes = 100000;
using Body = Repeat<1, Conv2d<3, 16, 3, 1, 1, false>, BatchNorm2d<16>, ReLU, basic_stage<16, 32, 2>, GlobalAvgPool2d>;
using SplitHead = Plan<Colocate<Replicate<N, Body>, Split<N, Linear<32, Classes>>>, Loss<SoftmaxCrossEntropy>,
                       Input<16, 16, 3>, MicroBatch<64>>;
using Replicated = Plan<Replicate<N, Body, Linear<32, Classes>>, Loss<SoftmaxCrossEntropy>, Input<16, 16, 3>,
                        MicroBatch<64>>;

template <class P>
double step_ms(world<Host, comm::mpi_communicator>& w, int steps) {
  auto t = make_trainer<P>(w, Adam{.lr = 1e-3});
  std::mt19937 g(3);
  std::normal_distribution<float> nd;
  const std::size_t samples = std::size_t(P::global_batch(w.size()));
  std::vector<float> x(samples * 16 * 16 * 3);
  std::vector<std::int32_t> y(samples);
  for (auto& v : x) v = nd(g);
  for (auto& v : y) v = std::int32_t(g() % Classes);
  const auto mine = t.share({.inputs = x, .labels = y, .samples = samples});
  for (int s = 0; s < 2; ++s) t.step(mine);  // warm-up
  w.comm().barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) t.step(mine);
  w.comm().barrier();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps;
}

}  // namespace

int main(int argc, char** argv) {
  auto w = strata::init<Host>(argc, argv);
  const int steps = argc > 1 ? std::atoi(argv[1]) : 5;
  w.queue().set_threads(1);
  const double split = step_ms<SplitHead>(w, steps), repl = step_ms<Replicated>(w, steps);
  if (w.rank() == 0) {
    std::printf("%d processes x 1 thread, micro-batch 64 of 16x16x3 images, %d classes, float32, Adam\n", w.size(),
                Classes);
    std::printf("| plan | parameters | gradients | Adam state | peak per device | step ms |\n|---|---|---|---|---|---|\n");
    auto row = [](const char* name, auto mb_params, auto mb_grads, auto mb_adam, auto mb_peak, double ms) {
      std::printf("| %s | %.1f MB | %.1f MB | %.1f MB | %.1f MB | %.1f |\n", name, mb_params / 1e6, mb_grads / 1e6,
                  mb_adam / 1e6, mb_peak / 1e6, ms);
    };
    row("Colocate<Replicate<4, body>, Split<4, head>>", double(SplitHead::parameter_bytes(0)),
        double(SplitHead::gradient_bytes(0)), double(SplitHead::adam_state_bytes(0)),
        double(SplitHead::peak_memory_bytes(0)), split);
    row("Replicate<4, body, head>", double(Replicated::parameter_bytes(0)), double(Replicated::gradient_bytes(0)),
        double(Replicated::adam_state_bytes(0)), double(Replicated::peak_memory_bytes(0)), repl);
    std::printf("split / replicated: memory %.2f, step time %.2f\n",
                double(SplitHead::peak_memory_bytes(0)) / double(Replicated::peak_memory_bytes(0)), split / repl);
  }
  return 0;
}
