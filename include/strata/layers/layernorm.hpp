#pragma once
// LayerNorm<D>: normalises the last axis, with learned scale and shift (biased
// variance, eps 1e-5, as PyTorch). Needs whole features: under Split<N> its input is
// gathered unless rows are split. Under 2D/2.5D/3D a row's features are spread over a
// mesh row: each device sums its share of the row's moments, the sums are all-reduced
// over the row (c.mesh[0]), and γ, β are read (and their gradients written) at the
// device's feature slice.
#include "strata/core/communicator.hpp"
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
  // 2D/2.5D/3D: the backward's two row sums in scratch.
  static constexpr buffer_needs memory(const local_dims& d) {
    if (d.q > 0) return {.keep_input = true, .stash_stats = 2 * d.rows, .scratch_stats = 2 * d.rows};
    return {.keep_input = true, .stash_stats = 2 * d.rows, .scratch_values = d.rows * d.in_cols, .weight_pass = true};
  }

  template <class C>
  static void forward(C& c) {
    if (c.mesh[0]) {  // features spread over a mesh row
      const std::size_t F = c.in_cols;
      layernorm_partial_moments(c.q, c.rows, F, c.x, c.stash_stats);
      c.mesh[0]->all_reduce(c.stash_stats, 2 * c.rows, comm::reduce_op::sum);
      layernorm_forward_moments(c.q, c.rows, F, std::size_t(D), eps, c.x, c.w[0] + c.col0, c.w[1] + c.col0, c.stash_stats,
                                c.y);
      return;
    }
    layernorm_forward(c.q, c.rows, std::size_t(D), c.x, c.w[0], c.w[1], eps, c.y, c.stash_stats,
                      c.stash_stats + c.rows);
  }
  template <class C>
  static void backward(C& c) {
    if (c.mesh[0]) {  // features spread over a mesh row
      const std::size_t F = c.in_cols;
      const auto* mean = c.stash_stats;
      const auto* rstd = c.stash_stats + c.rows;
      if (c.dx) {
        layernorm_backward_partial(c.q, c.rows, F, c.x, c.w[0] + c.col0, mean, rstd, c.dy, c.scratch_stats);
        c.mesh[1]->all_reduce(c.scratch_stats, 2 * c.rows, comm::reduce_op::sum);
        layernorm_backward_moments(c.q, c.rows, F, std::size_t(D), c.x, c.w[0] + c.col0, mean, rstd, c.dy,
                                   static_cast<const typename C::stat_type*>(c.scratch_stats), c.dx);
      }
      // dγ, dβ of the slice; the rest of the whole tensors stays zero here and the
      // gradient reduction over the part sums the slices
      layernorm_backward(c.q, c.rows, F, c.x, c.w[0] + c.col0, mean, rstd, c.dy, static_cast<typename C::value_type*>(nullptr),
                         c.g[0] + c.col0, c.g[1] + c.col0, true);
      return;
    }
    auto* dx = c.dx ? c.dx : c.scratch_values;  // the kernel always writes dx
    layernorm_backward(c.q, c.rows, std::size_t(D), c.x, c.w[0], c.stash_stats, c.stash_stats + c.rows, c.dy, dx,
                       c.g[0], c.g[1], true);
  }
  // Zero-bubble halves (features whole; on a mesh it runs whole): dx in B, dγ and dβ in W.
  template <class C>
  static void backward_data(C& c) {
    if (c.mesh[0]) return backward(c);
    using G = typename C::master_type;
    if (c.dx)
      layernorm_backward(c.q, c.rows, std::size_t(D), c.x, c.w[0], c.stash_stats, c.stash_stats + c.rows, c.dy, c.dx,
                         static_cast<G*>(nullptr), static_cast<G*>(nullptr), true);
  }
  template <class C>
  static void backward_weights(C& c) {
    if (c.mesh[0]) return;
    layernorm_backward(c.q, c.rows, std::size_t(D), c.x, c.w[0], c.stash_stats, c.stash_stats + c.rows, c.dy,
                       static_cast<typename C::value_type*>(nullptr), c.g[0], c.g[1], true);
  }
};

}  // namespace strata::layers
