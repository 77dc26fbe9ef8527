#pragma once
// MultiHeadAttention<D, Heads, Seq>: self-attention over [Seq, D]. Under Split<N> heads
// are divided among devices: QKV column-parallel, output projection row-parallel.
// Planned and costed; not executable yet.
#include "strata/core/rules.hpp"
#include "strata/layers/layer.hpp"

namespace strata::layers {

template <int D, int Heads, int Seq>
struct MultiHeadAttention {
  static_assert(rule::layer_dim_positive<D, Heads>::value && rule::layer_dim_positive<Seq, Seq>::value);
  static_assert(rule::attention_heads_divide_dim<D, Heads>::value);
  static constexpr std::string_view name = "MultiHeadAttention";
  static constexpr layer_role role = layer_role::attention;
  static constexpr int features = D;
  static constexpr int heads = Heads;
  static constexpr int seq = Seq;
  static constexpr int split_extent = Heads;
  static constexpr shape_t in_shape = shape_v<Seq, D>;
  static constexpr shape_t out_shape(shape_t in) { return in; }
  static constexpr std::array<param_t, 4> params{{{"w_qkv", shape_v<D, 3 * D>, param_role::weight, 1},
                                                  {"b_qkv", shape_v<3 * D>, param_role::bias, 0},
                                                  {"w_out", shape_v<D, D>, param_role::weight, 0},
                                                  {"b_out", shape_v<D>, param_role::replicated, -1}}};
  static constexpr long long forward_flops(shape_t) {
    const long long s = Seq, d = D;
    return 2 * s * d * 3 * d + 4 * s * s * d + 2 * s * d * d;
  }
  static constexpr long long backward_flops(shape_t in) { return 2 * forward_flops(in); }

  static constexpr shard_choice shard(const shard_query& q) {
    shard_choice c;
    c.sig = signature::head_parallel;
    c.need = sbp::broadcast;
    c.out = sbp::partial;
    c.feat_div = q.n;
    c.flops_div = q.n;
    c.partial_input_grad = true;
    c.param_axis = {1, 0, 0, -1, -1, -1};  // QKV on its outputs, the out-projection on its inputs
    if (Heads % q.n != 0) c.violate(shard_rule::split_heads, Heads);
    return c;
  }
  // x; this device's heads' q/k/v, attention probabilities and context.
  static constexpr buffer_needs memory(const local_dims& d) {
    const long long split = d.sig == signature::head_parallel ? d.n : 1;
    const long long seqs = d.rows / Seq;
    return {.keep_input = true, .stash_values = 4 * d.rows * D / split + seqs * (Heads / split) * Seq * Seq};
  }
};

}  // namespace strata::layers
