#pragma once
// MoE<Experts, D, Hidden, TopK>: a gated mixture of two-layer expert MLPs applied per
// token. Under Split<N> experts are divided among devices and tokens travel by
// all-to-all. Planned and costed; not executable yet.
#include "strata/core/rules.hpp"
#include "strata/layers/layer.hpp"

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

  static constexpr shard_choice shard(const shard_query& q) {
    shard_choice c;
    c.sig = signature::expert_parallel;
    c.need = c.out = sbp::split_batch;
    c.rows_div = q.n;
    c.flops_div = q.n;
    c.param_axis = {-1, 0, 0, -1, -1, -1};  // experts divided; the gate whole
    if (Experts % q.n != 0) c.violate(shard_rule::split_experts, Experts);
    // every device routes an equal share of the micro-batch's tokens
    const long long micro_tokens = q.micro_batch * tokens(q.in);
    if (micro_tokens % q.n != 0) c.violate(shard_rule::split_tokens, static_cast<int>(micro_tokens));
    // dispatch and combine, each way: this device's tokens × top-k copies of width D
    const long long routed = micro_tokens / q.n * D * TopK;
    c.add(collective::all_to_all, group_axis::part, pass::forward, routed, 2);
    c.add(collective::all_to_all, group_axis::part, pass::backward, routed, 2);
    return c;
  }
  // The tokens, gate probabilities, and each routed copy's hidden activation.
  static constexpr buffer_needs memory(const local_dims& d) {
    return {.keep_input = true, .stash_values = d.rows * (Experts + TopK * (D + Hidden))};
  }
};

}  // namespace strata::layers
