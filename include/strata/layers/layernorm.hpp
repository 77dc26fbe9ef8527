#pragma once
// LayerNorm<D>: normalises the last axis, with learned scale and shift.
#include "strata/layers/layer.hpp"
#include "strata/plan/rules.hpp"

namespace strata::layers {

template <int D>
struct LayerNorm {
  static_assert(rule::layer_dim_positive<D, D>::value);
  static constexpr std::string_view name = "LayerNorm";
  static constexpr layer_role role = layer_role::layernorm;
  static constexpr int features = D;
  static constexpr shape_t in_shape = shape_v<D>;
  static constexpr shape_t out_shape(shape_t in) { return in; }
  static constexpr std::array<param_t, 2> params{{{"gamma", shape_v<D>, param_role::replicated, -1},
                                                  {"beta", shape_v<D>, param_role::replicated, -1}}};
  static constexpr long long rows(shape_t in) { return in.numel() / D; }
  static constexpr long long forward_flops(shape_t in) { return 8LL * in.numel(); }
  static constexpr long long backward_flops(shape_t in) { return 12LL * in.numel(); }
  // x plus per-row mean and 1/σ.
  static constexpr long long stash_elems(shape_t in) { return in.numel() + 2 * rows(in); }
};

}  // namespace strata::layers
