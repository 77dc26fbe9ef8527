// The Fashion-MNIST main job, written once for every backend: the plans and the
// training loop. fashion_mnist_train.cpp runs it on CPUs (MPI), fashion_mnist_train.cu
// on GPUs (NCCL).
#pragma once
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "agreed_load.hpp"
#include "arguments.hpp"
#include "fashion_mnist/fashion_mnist.hpp"
#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

namespace fashion_mnist_job {

using namespace strata;

using Net = Pipeline<Replicate<1, Flatten, Linear<784, 512>, ReLU>,
                     Replicate<1, Linear<512, 512>, ReLU, Linear<512, 10>>>;
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, MicroBatch<64>, NumMicroBatch<4>, Schedule<PreferBackward>>;

static_assert(P::devices_per_replica == 2);
static_assert(P::deadlock_free);
static_assert(P::peak_activation_bytes(0) <= (64 << 20));

using Single = Plan<Replicate<1, Flatten, Linear<784, 512>, ReLU, Linear<512, 512>, ReLU, Linear<512, 10>>,
                    Loss<SoftmaxCrossEntropy>, MicroBatch<64>, NumMicroBatch<4>>;

// T: float, or bf16 for mixed precision (bf16 activations, FP32 master weights).
template <class Plan, class T, class World>
int run(World& world, int epochs) {
  using P = Plan;
  {
    auto train = make_trainer<P, T>(world, Adam{.lr = 1e-3});
    const int dp = train.data_parallel();
    const int replica = train.coord().data;
    const bool leader = world.rank() == 0;
    if (leader)
      std::printf("strata: %d processes = %d stages x DP %d, global batch %d, %s, %s\n", world.size(), P::stages, dp,
                  P::global_batch(world.size()), P::stages > 1 ? "1F1B, Adam lr 1e-3" : "one device, Adam lr 1e-3",
                  std::is_same_v<T, bf16> ? "bf16 mixed precision (FP32 master weights)" : "float32");

    const auto train_set = examples::agreed_load(world, [] { return fashion_mnist::load_fashion_mnist<float>(fashion_mnist::split::train); });
    const auto test_set = examples::agreed_load(world, [] { return fashion_mnist::load_fashion_mnist<float>(fashion_mnist::split::test); });
    fashion_mnist::sharded_loader loader(train_set, replica, dp, P::replica_batch, /*seed=*/2024);
    const auto steps = loader.steps_per_epoch();

    for (int e = 0; e < epochs; ++e) {
      const auto t0 = std::chrono::steady_clock::now();
      double window_loss = 0;
      int window = 0;
      for (std::int64_t s = 0; s < steps; ++s) {
        const auto b = loader.batch(static_cast<std::uint64_t>(e), s);
        const step_result r = train.step({.inputs = b.images, .labels = b.labels, .samples = std::size_t(b.size)});
        window_loss += r.loss;
        ++window;
        if (leader && ((s + 1) % 20 == 0 || s + 1 == steps)) {
          const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          std::printf("epoch %d step %4lld/%lld  loss %.4f  %.0f samples/s\n", e + 1, static_cast<long long>(s + 1),
                      static_cast<long long>(steps), window_loss / window,
                      double(s + 1) * P::global_batch(world.size()) / secs);
          std::fflush(stdout);
          window_loss = 0;
          window = 0;
        }
      }
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (leader) std::printf("epoch %d done in %.2f s\n", e + 1, secs);
    }

    // Every test image exactly once across the replicas; the last chunk padded.
    auto eval = fashion_mnist::evaluation_loader(test_set, replica, dp, P::micro_batch * P::num_micro_batch);
    long long correct = 0, rows = 0;
    for (std::int64_t s = 0; s < eval.steps_per_epoch(); ++s) {
      const auto b = eval.batch(0, s);
      const step_result r =
          train.evaluate({.inputs = b.images, .labels = b.labels, .samples = std::size_t(b.size)}, std::size_t(b.valid));
      correct += r.correct;
      rows += r.rows;
    }
    if (leader) std::printf("test images: %lld\ntest accuracy: %.4f\n", rows, double(correct) / double(rows));
  }
  return 0;
}

// `prog [epochs] [fp32|bf16]`: every rank reads the same arguments, so a bad one stops
// every rank before any collective.
template <class World>
int run_job(World& world, int argc, char** argv) {
  const int epochs = argc > 1 ? examples::positive_int("epochs", argv[1]) : 3;  // "1abc" refused
  const std::string precision = argc > 2 ? argv[2] : "fp32";
  if (precision != "fp32" && precision != "bf16")
    throw agreed_error("precision must be fp32 or bf16, not '" + precision + "'");
  const bool bf = precision == "bf16";
  if (world.size() == 1) return bf ? run<Single, bf16>(world, epochs) : run<Single, float>(world, epochs);
  return bf ? run<P, bf16>(world, epochs) : run<P, float>(world, epochs);
}


}  // namespace fashion_mnist_job
