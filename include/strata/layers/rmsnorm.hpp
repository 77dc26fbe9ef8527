#pragma once
// RMSNorm<D, EpsExponent = 5>: y = x / √(mean_j x_j² + eps) · γ over the last axis, one
// learned scale ("weight") and no shift — Llama's, Mistral's and Qwen's normalisation;
// eps = 10^−EpsExponent (5: Llama 2/3 and Mistral; 6: Llama 1 and Qwen2).
//
// It runs LayerNorm's kernels (backend/normalization.hpp) on a zero mean: the forward
// zeroes the moments' Σx before they become [mean | 1/σ], so the mean is 0 and σ² the mean
// square; the backward zeroes Σg, so dx = rstd·(g − x̂·mean(g·x̂)). The same row formulas
// (core/math.hpp) thus give RMSNorm on every backend, and under 2D/2.5D/3D on features
// spread over a mesh row, whose sums are all-reduced as LayerNorm's are.
#include "strata/core/communicator.hpp"
#include "strata/core/rules.hpp"
#include "strata/layers/layer.hpp"

namespace strata::layers {

template <int D, int EpsExponent = 5>
struct RMSNorm {
  static_assert(rule::layer_dim_positive<D, D>::value && rule::norm_eps_exponent<EpsExponent>::value);
  static constexpr std::string_view name = "RMSNorm";
  static constexpr layer_role role = layer_role::layernorm;  // a normalisation: whole features, scale 1
  static constexpr int features = D;
  static constexpr double eps = [] {
    double p = 1.0;  // 10^EpsExponent, exact
    for (int i = 0; i < EpsExponent; ++i) p *= 10.0;
    return 1.0 / p;  // one rounding: the literal 1e-EpsExponent
  }();
  static constexpr shape_t in_shape = shape_v<D>;
  static constexpr shape_t out_shape(shape_t in) { return in; }
  static constexpr std::array<param_t, 1> params{{{"weight", shape_v<D>, param_role::replicated, -1}}};
  static constexpr long long forward_flops(shape_t in) { return 4LL * in.numel(); }
  static constexpr long long backward_flops(shape_t in) { return 8LL * in.numel(); }
  // x and each row's [0 | 1/rms] (kept); the backward's two row sums in scratch.
  static constexpr buffer_needs memory(const local_dims& d) {
    return {.keep_input = true, .stash_stats = 2 * d.rows, .scratch_stats = 2 * d.rows, .weight_pass = d.q == 0};
  }

  template <class C>
  static void forward(C& c) {
    using S = typename C::stat_type;
    const std::size_t F = c.in_cols;  // D, or this device's share of a mesh row
    layernorm_partial_moments(c.q, c.rows, F, c.x, c.stash_stats);
    if (c.mesh[0]) c.mesh[0]->all_reduce(c.stash_stats, 2 * c.rows, comm::reduce_op::sum);
    fill(c.q, c.rows, S(0), c.stash_stats);  // Σx = 0: a zero mean
    layernorm_forward_moments(c.q, c.rows, F, std::size_t(D), eps, c.x, c.w[0] + c.col0,
                              static_cast<const typename C::value_type*>(nullptr), c.stash_stats, c.y);
  }
  template <class C>
  static void backward(C& c) {
    backward_input(c);
    weight_grad(c);
  }
  // Zero-bubble halves (features whole; on a mesh it runs whole): dx in B, dγ in W.
  template <class C>
  static void backward_data(C& c) {
    if (c.mesh[0]) return backward(c);
    backward_input(c);
  }
  template <class C>
  static void backward_weights(C& c) {
    if (!c.mesh[0]) weight_grad(c);
  }

 private:
  template <class C>
  static void backward_input(C& c) {
    using S = typename C::stat_type;
    if (!c.dx) return;
    const std::size_t F = c.in_cols;
    const S* zero_mean = c.stash_stats;
    const S* rstd = c.stash_stats + c.rows;
    layernorm_backward_partial(c.q, c.rows, F, c.x, c.w[0] + c.col0, zero_mean, rstd, c.dy, c.scratch_stats);
    if (c.mesh[0]) c.mesh[1]->all_reduce(c.scratch_stats, 2 * c.rows, comm::reduce_op::sum);
    fill(c.q, c.rows, S(0), c.scratch_stats);  // Σg = 0: no mean to subtract
    layernorm_backward_moments(c.q, c.rows, F, std::size_t(D), c.x, c.w[0] + c.col0, zero_mean, rstd, c.dy,
                               static_cast<const S*>(c.scratch_stats), c.dx);
  }
  // dγ += Σ_rows dy·x̂ (a mesh device: its slice; the part's gradient reduction sums them).
  template <class C>
  static void weight_grad(C& c) {
    using G = typename C::master_type;
    layernorm_backward(c.q, c.rows, c.in_cols, c.x, c.w[0] + c.col0, c.stash_stats, c.stash_stats + c.rows, c.dy,
                       static_cast<typename C::value_type*>(nullptr), c.g[0] + c.col0, static_cast<G*>(nullptr), true);
  }
};

}  // namespace strata::layers
