// ResNet-50 (examples/resnet/resnet50.hpp) as a plan: its parameter and FLOP counts checked
// against torchvision's resnet50 at compile time, and the plan report of the data-parallel
// model (EPL chapter 7) printed:
//   resnet50_plan [world (4)]
#include <cstdio>
#include <string>

#include "resnet/resnet50.hpp"

using namespace strata;

// One device, 32 images of 224 × 224 per step.
using One = resnet50::Plan<32>;
static_assert(One::valid && One::classes == 1000);
static_assert(One::num_layers == 195);  // 194 and the loss
// torchvision: sum(p.numel() for p in resnet50().parameters()) == 25,557,032.
static_assert(One::stage_param_elems(0) == 25'557'032);
// torchvision's "4.09 GFLOPS" are multiply-adds of the convolutions and the classifier:
// 4,089,184,256 per 224 × 224 image.
static_assert(resnet50::conv_linear_macs_per_sample<One>() == 4'089'184'256);
// The plan counts 2 FLOPs per multiply-add, plus the biases, batch norms (7 per element),
// ReLUs, pools and residual adds: 8,273,207,152 forward FLOPs per image (2 × 4.09 G
// + 94.8 M), and 3× that with the backward (24.75 GFLOP per image per step).
static_assert(resnet50::forward_flops_per_sample<One>() == 8'273'207'152);
static_assert(One::flops_per_replica_step() == 32 * 24'747'108'136LL);
static_assert(One::layer_plans[3].out == shape_v<56, 56, 64>);          // after the stem's max pool
static_assert(One::layer_plans[One::num_layers - 3].in == shape_v<7, 7, 2048>);  // GlobalAvgPool2d's input

// Data parallelism over 4 devices, each 8 of the micro-batch's 32 images (batch norm's
// statistics are the micro-batch's: synchronised over the 4).
using DP = resnet50::Plan<32, 224, 4>;
static_assert(DP::valid && DP::devices_per_replica == 4);
static_assert(DP::stage_param_elems(0) == 25'557'032);

int main(int argc, char** argv) {
  const int world = argc > 1 ? std::stoi(argv[1]) : 4;
  std::printf("ResNet-50: %lld parameters, %.3f GMACs (conv + linear) and %.3f GFLOP forward per 224x224 image\n\n",
              One::stage_param_elems(0), double(resnet50::conv_linear_macs_per_sample<One>()) * 1e-9,
              double(resnet50::forward_flops_per_sample<One>()) * 1e-9);
  std::fputs(report<DP>(world).c_str(), stdout);
}
