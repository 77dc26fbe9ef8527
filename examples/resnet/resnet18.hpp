// ResNet-18 (He et al. 2016; torchvision's resnet18) written as strata layers, images
// channels last [H, W, C]. Colossal-AI's pipeline example cuts it into two stages after
// layer2: resnet18::stage0 and stage1 are those two halves.
#pragma once
#include <strata/strata.hpp>

namespace examples::resnet {

using namespace strata;

// The basic block: 3×3 (stride S), BN, ReLU, 3×3, BN, added to the input — or, where the
// block changes the size or the channels, to a 1×1 projection of it (Shortcut) — then ReLU.
template <int In, int Out, int S>
using basic_residual = std::conditional_t<
    S == 1 && In == Out,
    Residual<Conv2d<In, Out, 3, 1, 1, false>, BatchNorm2d<Out>, ReLU, Conv2d<Out, Out, 3, 1, 1, false>, BatchNorm2d<Out>>,
    Residual<Shortcut<Conv2d<In, Out, 1, S, 0, false>, BatchNorm2d<Out>>, Conv2d<In, Out, 3, S, 1, false>,
             BatchNorm2d<Out>, ReLU, Conv2d<Out, Out, 3, 1, 1, false>, BatchNorm2d<Out>>>;

// A stage of two basic blocks, the first with stride S.
template <int In, int Out, int S>
using basic_stage = Repeat<1, basic_residual<In, Out, S>, ReLU, basic_residual<Out, Out, 1>, ReLU>;

template <int Classes = 1000>
struct resnet18 {
  // conv1 7×7/2, BN, ReLU, max pool 3/2: 224 → 56
  using stem = Repeat<1, Conv2d<3, 64, 7, 2, 3, false>, BatchNorm2d<64>, ReLU, MaxPool2d<3, 2, 1>>;
  using layer1 = basic_stage<64, 64, 1>;
  using layer2 = basic_stage<64, 128, 2>;
  using layer3 = basic_stage<128, 256, 2>;
  using layer4 = basic_stage<256, 512, 2>;
  using head = Repeat<1, GlobalAvgPool2d, Linear<512, Classes>>;
  // Colossal-AI's two stages: the cut after layer2
  using stage0 = Replicate<1, stem, layer1, layer2>;
  using stage1 = Replicate<1, layer3, layer4, head>;
  using whole = Replicate<1, stem, layer1, layer2, layer3, layer4, head>;
};

}  // namespace examples::resnet
