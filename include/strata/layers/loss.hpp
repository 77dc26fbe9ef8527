#pragma once
// SoftmaxCrossEntropy: mean cross-entropy of logits [.., C] against integer labels.
// When the logits arrive split along C it runs vocabulary-parallel.
#include "strata/layers/layer.hpp"

namespace strata::layers {

struct SoftmaxCrossEntropy {
  static constexpr std::string_view name = "SoftmaxCrossEntropy";
  static constexpr layer_role role = layer_role::loss;
  static constexpr shape_t in_shape{};
  static constexpr shape_t out_shape(shape_t) { return shape_v<1>; }
  static constexpr std::array<param_t, 0> params{};
  static constexpr long long forward_flops(shape_t in) { return 5LL * in.numel(); }
  static constexpr long long backward_flops(shape_t in) { return 2LL * in.numel(); }
  static constexpr long long stash_elems(shape_t in) { return in.numel(); }  // probabilities
};

}  // namespace strata::layers
