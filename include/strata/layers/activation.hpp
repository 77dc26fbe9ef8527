#pragma once
// Pointwise activations and Flatten: shape-polymorphic layers without parameters.
#include "strata/layers/layer.hpp"

namespace strata::detail {
template <long long FwdPerElem, long long BwdPerElem>
struct pointwise {
  static constexpr layer_role role = layer_role::elementwise;
  static constexpr shape_t in_shape{};
  static constexpr shape_t out_shape(shape_t in) { return in; }
  static constexpr std::array<param_t, 0> params{};
  static constexpr long long forward_flops(shape_t in) { return FwdPerElem * in.numel(); }
  static constexpr long long backward_flops(shape_t in) { return BwdPerElem * in.numel(); }
  // The pre-activation is kept: both derivatives are functions of it.
  static constexpr long long stash_elems(shape_t in) { return in.numel(); }
};
}  // namespace strata::detail

namespace strata::layers {

struct ReLU : detail::pointwise<1, 1> {
  static constexpr std::string_view name = "ReLU";
};

// tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
struct GeLU : detail::pointwise<8, 12> {
  static constexpr std::string_view name = "GeLU";
};

struct Flatten {
  static constexpr std::string_view name = "Flatten";
  static constexpr layer_role role = layer_role::reshape;
  static constexpr shape_t in_shape{};
  static constexpr shape_t out_shape(shape_t in) {
    return shape_t{1, {static_cast<int>(in.numel()), 0, 0, 0}};
  }
  static constexpr std::array<param_t, 0> params{};
  static constexpr long long forward_flops(shape_t) { return 0; }
  static constexpr long long backward_flops(shape_t) { return 0; }
  static constexpr long long stash_elems(shape_t) { return 0; }
};

}  // namespace strata::layers
