#pragma once
// Linear<In, Out, Bias>: y = x·W + b over the last axis; W is [In, Out] row-major.
#include "strata/layers/layer.hpp"
#include "strata/plan/rules.hpp"

namespace strata::layers {

template <int In, int Out, bool Bias = true>
struct Linear {
  static_assert(rule::layer_dim_positive<In, Out>::value);
  static constexpr std::string_view name = "Linear";
  static constexpr layer_role role = layer_role::linear;
  static constexpr int in_features = In;
  static constexpr int out_features = Out;
  static constexpr bool has_bias = Bias;
  static constexpr shape_t in_shape = shape_v<In>;
  static constexpr shape_t out_shape(shape_t in) { return in.with_last(Out); }
  // Sharding of W/b is decided by the planner (column: W on axis 1, b split;
  // row: W on axis 0, b whole and added once after the reduction).
  static constexpr auto params = [] {
    if constexpr (Bias)
      return std::array<param_t, 2>{{{"weight", shape_v<In, Out>, param_role::weight, 1},
                                     {"bias", shape_v<Out>, param_role::bias, 0}}};
    else
      return std::array<param_t, 1>{{{"weight", shape_v<In, Out>, param_role::weight, 1}}};
  }();
  static constexpr long long rows(shape_t in) { return in.numel() / In; }
  static constexpr long long forward_flops(shape_t in) {
    return rows(in) * (2LL * In * Out + (Bias ? Out : 0));
  }
  // dX = dY·Wᵀ and dW = Xᵀ·dY, plus the bias column sums.
  static constexpr long long backward_flops(shape_t in) {
    return rows(in) * (4LL * In * Out + (Bias ? Out : 0));
  }
  static constexpr long long stash_elems(shape_t in) { return in.numel(); }
};

}  // namespace strata::layers
