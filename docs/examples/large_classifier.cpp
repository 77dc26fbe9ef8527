// Why EPL splits the classifier (EPL 1.2.3 / 5.3.1): a ResNet body replicated over four
// devices beside a 100,000-class classifier split over the same four, against the same model
// all replicated. The plan's own numbers say it: per device, the split classifier holds a
// quarter of the head's weights, gradients and Adam state, at the price of an all-gather of
// the features forward and a reduce-scatter of their gradient backward.
#include <cstdio>

#include "resnet/resnet18.hpp"
#include <strata/strata.hpp>
using namespace strata;
using examples::resnet::basic_stage;

constexpr int Classes = 100000;
using Body = Repeat<1, Conv2d<3, 32, 3, 1, 1, false>, BatchNorm2d<32>, ReLU, basic_stage<32, 64, 2>,
                   basic_stage<64, 128, 2>, GlobalAvgPool2d>;
using SplitHead = Plan<Colocate<Replicate<4, Body>, Split<4, Linear<128, Classes>>>, Loss<SoftmaxCrossEntropy>,
                       Input<32, 32, 3>, MicroBatch<64>>;
using Replicated = Plan<Replicate<4, Body, Linear<128, Classes>>, Loss<SoftmaxCrossEntropy>, Input<32, 32, 3>,
                        MicroBatch<64>>;

// the head's 12.8 M weights (128 × 100,000 + bias) dominate the model
constexpr long long head = 128LL * Classes + Classes;
static_assert(SplitHead::model_parameters == Replicated::model_parameters);
static_assert(SplitHead::model_parameters - head < head / 10);
// per device: the split head keeps a quarter of them, and a quarter of their gradients and state
static_assert(Replicated::parameter_bytes(0) - SplitHead::parameter_bytes(0) == 3 * head / 4 * 4);
static_assert(Replicated::adam_state_bytes(0) - SplitHead::adam_state_bytes(0) == 2 * (3 * head / 4 * 4));
static_assert(SplitHead::peak_memory_bytes(0) < Replicated::peak_memory_bytes(0) / 2);

int main() {
  std::printf("per device, 100,000 classes: split head %.1f MB, replicated %.1f MB (parameters, gradients, "
              "Adam state, activations)\n",
              double(SplitHead::peak_memory_bytes(0)) / 1e6, double(Replicated::peak_memory_bytes(0)) / 1e6);
  return 0;
}
