// Run-time bad input must stop every rank with a message that names the problem and a
// non-zero exit, before any collective can hang; an error every rank agreed on is printed
// once. Launched by ctest through
// check_bad_input.cmake with a mode:
//   world   3 ranks for a plan whose replica needs 2 devices
//   shape   one rank passes a batch with the wrong number of samples
//   width   every rank passes samples of the wrong width
//   label   one rank passes a label outside the classes
//   nan     one rank's inputs hold a NaN
//   data    the data set directory does not exist
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

#include "fashion_mnist/fashion_mnist.hpp"
#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

using namespace strata;

using PP = Plan<Pipeline<Replicate<1, Linear<8, 16>, ReLU>, Replicate<1, Linear<16, 4>>>, Loss<SoftmaxCrossEntropy>,
                MicroBatch<4>, NumMicroBatch<2>>;
using DP = Plan<Replicate<1, Linear<8, 16>, ReLU, Linear<16, 4>>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>, NumMicroBatch<2>>;

int main(int argc, char** argv) {
  auto world = strata::init<Host>(argc, argv);
  const char* mode = argc > 1 ? argv[1] : "";
  try {
    if (!std::strcmp(mode, "world")) {
      auto t = make_trainer<PP>(world, SGD{});
      return 0;
    }
    if (!std::strcmp(mode, "data")) {
      auto d = fashion_mnist::load_fashion_mnist<float>(fashion_mnist::split::train, "/nonexistent/fashion-mnist");
      return 0;
    }
    auto t = make_trainer<DP>(world, SGD{});
    std::size_t samples = 8, width = 8;
    std::vector<float> x(16 * 8, 0.5f);
    std::vector<std::int32_t> y(16, 1);
    const bool culprit = world.rank() == world.size() - 1;
    if (!std::strcmp(mode, "shape") && culprit) samples = 6;
    if (!std::strcmp(mode, "width")) width = 7;
    if (!std::strcmp(mode, "label") && culprit) y[3] = 11;
    if (!std::strcmp(mode, "nan") && culprit) x[5] = std::nanf("");
    const batch_view<float> b{.inputs = std::span<const float>(x).first(samples * width),
                              .labels = std::span<const std::int32_t>(y).first(samples), .samples = samples};
    t.step(b);
    t.step(b);
    std::printf("rank %d: no error\n", world.rank());
    return 0;
  } catch (const std::exception& e) {
    // every rank has the error (the test checks each); an agreed one is printed once, by rank 0
    std::printf("rank %d threw: %s\n", world.rank(), e.what());
    std::fflush(stdout);
    if (dynamic_cast<const agreed_error*>(&e) != nullptr) return world.fail(e);
    std::fprintf(stderr, "[strata] rank %d: %s\n", world.rank(), e.what());
    return 1;
  }
}
