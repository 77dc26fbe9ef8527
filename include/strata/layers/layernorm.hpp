#pragma once
// LayerNorm<D>: normalises the last axis, with learned scale and shift (biased
// variance, eps 1e-5, as PyTorch). Needs whole features: under Split<N> its input is
// gathered unless rows are split.
#include "strata/core/rules.hpp"
#include "strata/layers/layer.hpp"

namespace strata::layers {

template <int D>
struct LayerNorm {
  static_assert(rule::layer_dim_positive<D, D>::value);
  static constexpr std::string_view name = "LayerNorm";
  static constexpr layer_role role = layer_role::layernorm;
  static constexpr int features = D;
  static constexpr double eps = 1e-5;
  static constexpr shape_t in_shape = shape_v<D>;
  static constexpr shape_t out_shape(shape_t in) { return in; }
  static constexpr std::array<param_t, 2> params{{{"gamma", shape_v<D>, param_role::replicated, -1},
                                                  {"beta", shape_v<D>, param_role::replicated, -1}}};
  static constexpr long long rows(shape_t in) { return in.numel() / D; }
  static constexpr long long forward_flops(shape_t in) { return 8LL * in.numel(); }
  static constexpr long long backward_flops(shape_t in) { return 12LL * in.numel(); }
  // x, plus each row's mean and 1/σ; a dx scratch when no input gradient is wanted.
  static constexpr buffer_needs memory(const local_dims& d) {
    return {.keep_input = true, .stash_stats = 2 * d.rows, .scratch_values = d.rows * d.in_cols};
  }

  template <class C>
  static void forward(C& c) {
    layernorm_forward(c.q, c.rows, std::size_t(D), c.x, c.w[0], c.w[1], eps, c.y, c.stash_stats,
                      c.stash_stats + c.rows);
  }
  template <class C>
  static void backward(C& c) {
    auto* dx = c.dx ? c.dx : c.scratch_values;  // the kernel always writes dx
    layernorm_backward(c.q, c.rows, std::size_t(D), c.x, c.w[0], c.stash_stats, c.stash_stats + c.rows, c.dy, dx,
                       c.g[0], c.g[1], true);
  }
};

}  // namespace strata::layers
