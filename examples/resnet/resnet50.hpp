// ResNet-50 as torchvision builds it (torchvision.models.resnet50, "v1.5": a bottleneck's
// stride is in its 3×3 convolution), images [H, W, 3] channels last:
//   stem     Conv2d 7×7/2 pad 3 (no bias), BatchNorm2d, ReLU, MaxPool2d 3/2 pad 1
//   stages   [3, 4, 6, 3] bottlenecks of widths 64, 128, 256, 512 (expansion 4); the first
//            of each stage has a projection shortcut (1×1 convolution with the stage's
//            stride, BatchNorm2d), the rest an identity skip; ReLU after every add
//   head     GlobalAvgPool2d, Linear<2048, Classes>
// Every convolution is bias-free (batch normalisation follows). 25,557,032 parameters at
// 1000 classes, torchvision's count (examples/resnet50_plan.cpp checks it, with the
// forward FLOPs). Each stage is written once with Repeat, so a compiler instantiates one
// bottleneck per stage, not sixteen.
//   using P = Plan<Replicate<N, resnet50::Net<>>, Input<224, 224, 3>, Loss<SoftmaxCrossEntropy>, MicroBatch<B>>;
#pragma once
#include <strata/strata.hpp>

namespace resnet50 {

using namespace strata;

inline constexpr int expansion = 4;

// The first bottleneck of a stage: In channels in, 4·W out, the stride in the 3×3
// convolution and in the projection shortcut.
template <int In, int W, int Stride>
using ProjectionBlock =
    Residual<Shortcut<Conv2d<In, expansion * W, 1, Stride, 0, false>, BatchNorm2d<expansion * W>>,  //
             Conv2d<In, W, 1, 1, 0, false>, BatchNorm2d<W>, ReLU,                                  //
             Conv2d<W, W, 3, Stride, 1, false>, BatchNorm2d<W>, ReLU,                              //
             Conv2d<W, expansion * W, 1, 1, 0, false>, BatchNorm2d<expansion * W>>;

// The others: 4·W channels in and out, an identity skip.
template <int W>
using Bottleneck = Residual<Conv2d<expansion * W, W, 1, 1, 0, false>, BatchNorm2d<W>, ReLU,  //
                            Conv2d<W, W, 3, 1, 1, false>, BatchNorm2d<W>, ReLU,              //
                            Conv2d<W, expansion * W, 1, 1, 0, false>, BatchNorm2d<expansion * W>>;

// A stage of `Blocks` bottlenecks (Blocks ≥ 2), each followed by ReLU.
template <int In, int W, int Blocks, int Stride>
using Stage = Repeat<1, ProjectionBlock<In, W, Stride>, ReLU, Repeat<Blocks - 1, Bottleneck<W>, ReLU>>;

using Stem = Repeat<1, Conv2d<3, 64, 7, 2, 3, false>, BatchNorm2d<64>, ReLU, MaxPool2d<3, 2, 1>>;

// The layers, to be placed in a strategy: Replicate<N, resnet50::Layers<>> is data
// parallelism over N devices (batch normalisation synchronised over them).
template <int Classes = 1000>
using Layers = Repeat<1, Stem,                        //
                      Stage<64, 64, 3, 1>,            // 56×56×256
                      Stage<256, 128, 4, 2>,          // 28×28×512
                      Stage<512, 256, 6, 2>,          // 14×14×1024
                      Stage<1024, 512, 3, 2>,         // 7×7×2048
                      GlobalAvgPool2d, Linear<expansion * 512, Classes>>;

// The whole network data-parallel over N devices.
template <int N = 1, int Classes = 1000>
using Net = Replicate<N, Layers<Classes>>;

// The training plan: float32 by default, images Size × Size × 3.
template <int Batch, int Size = 224, int N = 1, int Classes = 1000, class T = float>
using Plan = strata::Plan<Net<N, Classes>, Input<Size, Size, 3>, Loss<SoftmaxCrossEntropy>, MicroBatch<Batch>,
                          Element<T>>;

// Forward FLOPs of one sample (each layer's forward_flops at its input; a convolution
// counts 2 per multiply-add).
template <class P>
constexpr long long forward_flops_per_sample() {
  long long f = 0;
  for (const auto& lp : P::layer_plans) f += lp.desc.forward_flops(lp.in);
  return f;
}

// The multiply-adds of the convolutions and the classifier alone, what torchvision's
// "4.09 GFLOPS" counts (1 per multiply-add; no bias, batch norm, activation or pooling):
// each output pixel of a layer multiplies its weight once.
template <class P>
constexpr long long conv_linear_macs_per_sample() {
  long long m = 0;
  for (const auto& lp : P::layer_plans)
    if (lp.desc.name == "Conv2d" || lp.desc.name == "Linear")
      m += lp.desc.params[0].shape.numel() * lp.out.rows();
  return m;
}

}  // namespace resnet50
