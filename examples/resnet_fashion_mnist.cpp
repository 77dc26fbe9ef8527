// EPL's large-classification layout (EPL 1.2.3 / 5.3.1) on Fashion-MNIST: a ResNet body
// data-parallel beside a split classifier on the same devices,
//   Colocate<Replicate<2, ResNet>, Split<2, classifier>>,
// with batch normalisation synchronised over each replica's devices, so that every plan
// trains what one device trains. 4 processes = 2 replicas of that 2-device layout.
//   mpiexec -n 4 ./resnet_fashion_mnist [epochs]      train, then the test accuracy
//   mpiexec -n 4 ./resnet_fashion_mnist check         3 steps on Fashion-MNIST against one device
// One process runs the same layers as one device.
#include <chrono>
#include <cstdio>
#include <exception>
#include <span>
#include <string>

#include "agreed_load.hpp"
#include "arguments.hpp"
#include "fashion_mnist/fashion_mnist.hpp"
#include "resnet/resnet18.hpp"
#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>

using namespace strata;
using examples::resnet::basic_stage;

// A ResNet sized for 28×28: a 3×3 stem, then stages of two basic blocks at 16, 32 and 64
// channels (28 → 14 → 7 pixels a side), global average pooling.
using Body = Repeat<1, Conv2d<1, 16, 3, 1, 1, false>, BatchNorm2d<16>, ReLU, basic_stage<16, 16, 1>,
                   basic_stage<16, 32, 2>, basic_stage<32, 64, 2>, GlobalAvgPool2d>;
using Colocated = Plan<Colocate<Replicate<2, Body>, Split<2, Linear<64, 10>>>, Loss<SoftmaxCrossEntropy>,
                       Input<28, 28, 1>, MicroBatch<50>>;
using OneDevice = Plan<Replicate<1, Body, Linear<64, 10>>, Loss<SoftmaxCrossEntropy>, Input<28, 28, 1>,
                       MicroBatch<50>, NumMicroBatch<2>>;
static_assert(Colocated::devices_per_replica == 2 && Colocated::global_batch(4) == 100);
static_assert(OneDevice::replica_batch == 100);  // the same global batch on one device

template <class P, class World>
int train(World& world, int epochs) {
  auto t = make_trainer<P, float>(world, Adam{.lr = 2e-3});
  const int dp = t.data_parallel(), replica = t.coord().data;
  const bool leader = world.rank() == 0;
  const auto train_set = examples::agreed_load(world, [] {
    return fashion_mnist::load_fashion_mnist<float>(fashion_mnist::split::train);
  });
  const auto test_set = examples::agreed_load(world, [] {
    return fashion_mnist::load_fashion_mnist<float>(fashion_mnist::split::test);
  });
  if (leader)
    std::printf("strata: %d processes, %s, global batch %d, Adam lr 2e-3\n", world.size(),
                P::devices_per_replica > 1 ? "Colocate<Replicate<2, ResNet>, Split<2, Linear<64, 10>>> x DP" : "one device",
                P::global_batch(world.size()));
  fashion_mnist::sharded_loader loader(train_set, replica, dp, P::replica_batch, /*seed=*/7);
  const auto steps = loader.steps_per_epoch();
  for (int e = 0; e < epochs; ++e) {
    const auto t0 = std::chrono::steady_clock::now();
    double window = 0;
    for (std::int64_t s = 0; s < steps; ++s) {
      const auto b = loader.batch(static_cast<std::uint64_t>(e), s);
      window += t.step({.inputs = b.images, .labels = b.labels, .samples = std::size_t(b.size)}).loss;
      if (leader && (s + 1) % 100 == 0) {
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("epoch %d step %4lld/%lld  loss %.4f  %.0f images/s\n", e + 1, static_cast<long long>(s + 1),
                    static_cast<long long>(steps), window / 100, double(s + 1) * P::global_batch(world.size()) / secs);
        std::fflush(stdout);
        window = 0;
      }
    }
  }
  // every test image once across the replicas (10000 = 2 replicas x 100 batches of 50: no padding)
  auto eval = fashion_mnist::evaluation_loader(test_set, replica, dp, P::replica_batch);
  long long correct = 0, rows = 0;
  for (std::int64_t s = 0; s < eval.steps_per_epoch(); ++s) {
    const auto b = eval.batch(0, s);
    const step_result r =
        t.evaluate({.inputs = b.images, .labels = b.labels, .samples = std::size_t(b.size)}, std::size_t(b.valid));
    correct += r.correct;
    rows += r.rows;
  }
  if (leader) std::printf("test images: %lld\ntest accuracy: %.4f\n", rows, double(correct) / double(rows));
  return 0;
}

// The plan against one device on the first Fashion-MNIST batches, in float64.
template <class World>
int check(World& world) {
  const auto train_set = examples::agreed_load(world, [] {
    return fashion_mnist::load_fashion_mnist<float>(fashion_mnist::split::train);
  });
  auto data = [&]<class X>(int step, std::span<X> inputs, std::span<std::int32_t> labels) {
    const std::size_t n = labels.size(), first = std::size_t(step) * n;
    for (std::size_t i = 0; i < inputs.size(); ++i) inputs[i] = X(train_set.images[first * 784 + i]);
    for (std::size_t i = 0; i < n; ++i) labels[i] = train_set.labels[first + i];
  };
  const auto r = verify::against_one_device<Colocated, double>(world, Adam{.lr = 2e-3}, 3, data);
  if (world.rank() == 0) std::printf("%s", r.text().c_str());
  return r.ok() ? 0 : 1;
}

int main(int argc, char** argv) {
  auto world = strata::init<Host>(argc, argv);
  try {
    const std::string first = argc > 1 ? argv[1] : "1";
    if (first == "check") return check(world);
    const int epochs = examples::positive_int("epochs", first.c_str());
    return world.size() == 1 ? train<OneDevice>(world, epochs) : train<Colocated>(world, epochs);
  } catch (const std::exception& e) {
    return world.fail(e);
  }
}
