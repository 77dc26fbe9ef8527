#pragma once
// MultiHeadAttention<D, Heads, Seq>: self-attention over [Seq, D]. Under Split<N>
// heads are divided among devices: QKV column-parallel, output projection row-parallel.
#include "strata/layers/layer.hpp"
#include "strata/plan/rules.hpp"

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
  // x, q/k/v, attention probabilities per head, context.
  static constexpr long long stash_elems(shape_t) {
    const long long s = Seq, d = D;
    return s * d + 3 * s * d + Heads * s * s + s * d;
  }
};

}  // namespace strata::layers
