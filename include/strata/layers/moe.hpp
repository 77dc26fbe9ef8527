#pragma once
// MoE<Experts, D, Hidden, TopK>: a gated mixture of two-layer expert MLPs applied per
// token. Under Split<N> experts are divided among devices and tokens travel by all-to-all.
#include "strata/layers/layer.hpp"
#include "strata/plan/rules.hpp"

namespace strata::layers {

template <int Experts, int D, int Hidden, int TopK = 1>
struct MoE {
  static_assert(rule::layer_dim_positive<Experts, D>::value && rule::layer_dim_positive<Hidden, TopK>::value);
  static_assert(rule::moe_topk_within_experts<TopK, Experts>::value);
  static constexpr std::string_view name = "MoE";
  static constexpr layer_role role = layer_role::moe;
  static constexpr int experts = Experts;
  static constexpr int features = D;
  static constexpr int hidden = Hidden;
  static constexpr int top_k = TopK;
  static constexpr int split_extent = Experts;
  static constexpr shape_t in_shape = shape_v<D>;
  static constexpr shape_t out_shape(shape_t in) { return in; }
  static constexpr std::array<param_t, 3> params{
      {{"gate", shape_v<D, Experts>, param_role::replicated, -1},
       {"w_in", shape_t{3, {Experts, D, Hidden, 0}}, param_role::weight, 0},
       {"w_out", shape_t{3, {Experts, Hidden, D, 0}}, param_role::weight, 0}}};
  static constexpr long long tokens(shape_t in) { return in.numel() / D; }
  static constexpr long long forward_flops(shape_t in) {
    return tokens(in) * (2LL * D * Experts + TopK * 4LL * D * Hidden);
  }
  static constexpr long long backward_flops(shape_t in) { return 2 * forward_flops(in); }
  // token, gate probabilities, and each routed copy's hidden activation.
  static constexpr long long stash_elems(shape_t in) {
    return tokens(in) * (D + Experts + TopK * (D + Hidden));
  }
};

}  // namespace strata::layers
