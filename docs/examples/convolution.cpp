// Convolutions, pooling and synchronised batch normalisation. Images are [H, W, C]
// (channels last). EPL's colocated split classifier (1.2.3 / 5.3.1) in miniature: a
// data-parallel ResNet-style body beside a vocabulary-split classifier on the same
// devices; and Colossal-AI's two-stage ResNet-18 pipeline under 1F1B. Both train
// exactly what one device trains: BatchNorm2d's statistics are the micro-batch's in
// every plan (the Replicate's devices all-reduce their sums).
//   mpicxx -std=c++20 -O2 -Iinclude -Iexamples -DSTRATA_WITH_MPI convolution.cpp -o convolution -lopenblas
//   mpiexec -n 4 ./convolution      (two replicas of each plan; -n 2: one)
// mpi-ranks: 4
#include <cstdio>
#include <exception>

#include "resnet/resnet18.hpp"
#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>
using namespace strata;

// A stem, a residual block and a down-sampling block whose skip path is a projection
// (Shortcut<...>): 12×12×1 → 6×6×8 → 3×3×16 → 16.
using Block = Residual<Conv2d<8, 8, 3, 1, 1, false>, BatchNorm2d<8>, ReLU>;
using Down = Residual<Shortcut<Conv2d<8, 16, 1, 2, 0, false>, BatchNorm2d<16>>,  // the skip: 1×1, stride 2
                      Conv2d<8, 16, 3, 2, 1, false>, BatchNorm2d<16>, ReLU, Conv2d<16, 16, 3, 1, 1, false>,
                      BatchNorm2d<16>>;

// EPL 5.3.1: Colocate<Replicate<N, body>, Split<N, classifier>>.
using Body = Replicate<2, Conv2d<1, 8, 3, 1, 1, false>, BatchNorm2d<8>, ReLU, MaxPool2d<2>, Block, ReLU, Down, ReLU,
                       GlobalAvgPool2d>;
using Classifier = Split<2, Linear<16, 10>>;
using Colocated = Plan<Colocate<Body, Classifier>, Loss<SoftmaxCrossEntropy>, Input<12, 12, 1>, MicroBatch<8>,
                       NumMicroBatch<2>, Element<double>>;

static_assert(Colocated::layer_plans[0].in == shape_v<12, 12, 1> && Colocated::layer_plans[0].out == shape_v<12, 12, 8>);
static_assert(Colocated::layer_plans[3].out == shape_v<6, 6, 8>);   // after MaxPool2d<2>
static_assert(Colocated::layer_plans[12].out == shape_v<3, 3, 16>);  // the shortcut's output ...
static_assert(Colocated::layer_plans[13].out == shape_v<6, 6, 8>);   // ... and the block's input, handed on
static_assert(Colocated::layer_plans[21].out == shape_v<16>);        // after GlobalAvgPool2d
// Each device holds 4 of the micro-batch's 8 images; BatchNorm2d sums its statistics over
// both: C sums twice forward (Σx, then Σ(x − mean)²), 2C sums backward.
constexpr auto& bn = Colocated::layer_plans[1];
static_assert(bn.sig == signature::data_parallel && bn.rows_div == 2);
static_assert(bn.num_comms == 2 && bn.comms[0].kind == collective::all_reduce && bn.comms[0].calls == 2 &&
              bn.comms[0].elems == 8 && bn.comms[1].when == pass::backward && bn.comms[1].elems == 16);
// Each BatchNorm2d<C> keeps its running mean and variance and a step's sums of them and of its
// micro-batches (4C + 1 statistics): two of 8 channels and three of 16, in float64.
static_assert(Colocated::layer_state_bytes(0) == (2 * (4 * 8 + 1) + 3 * (4 * 16 + 1)) * 8);

// Colossal-AI's pipeline example: torchvision's resnet18 cut into two stages after layer2,
// under 1F1B (examples/resnet/resnet18.hpp; here on 64×64 images with 10 classes).
using R18 = examples::resnet::resnet18<10>;
using Piped = Plan<Pipeline<R18::stage0, R18::stage1>, Loss<SoftmaxCrossEntropy>, Input<64, 64, 3>, MicroBatch<2>,
                   NumMicroBatch<4>, Schedule<PreferBackward>, Element<double>>;
static_assert(Piped::stages == 2);
static_assert(Plan<R18::whole, Loss<SoftmaxCrossEntropy>, Input<224, 224, 3>>::model_parameters ==
              11689512 - 1000 * 513 + 10 * 513);  // torchvision's resnet18, 10 classes

template <class P>
bool check(auto& world, const char* what) {
  const auto r = verify::against_one_device<P>(world, Adam{.lr = 1e-2}, 3, verify::random_data<P>());
  if (world.rank() == 0) std::printf("%s\n%s", what, r.text().c_str());
  return r.ok();
}

int main(int argc, char** argv) {
  auto world = strata::init<Host>(argc, argv);
  try {
    const bool a = check<Colocated>(world, "Colocate<Replicate<2, ResNet-style body>, Split<2, classifier>>");
    const bool b = check<Piped>(world, "ResNet-18 in two stages (cut after layer2), 1F1B");
    return a && b ? 0 : 1;
  } catch (const std::exception& e) {
    return world.fail(e);
  }
}
