#pragma once
// SwiGLU<D, Hidden>: the gated MLP of Llama, Mistral and Qwen (Shazeer 2020),
//   y = (silu(x·W_gate) ⊙ (x·W_up)) · W_down,   silu(g) = g·σ(g),
// without biases. Parameters: w_gate [D, Hidden], w_up [D, Hidden], w_down [Hidden, D]
// (x·W, as Linear stores them; transformers' gate_proj, up_proj and down_proj are their
// transposes). Under Split<N> it is Megatron's MLP in one layer: gate and up
// column-parallel (each device Hidden/N of their columns, the same columns of both), down
// row-parallel, so the output is a partial sum the planner reduces once (an all-reduce, or
// a reduce-scatter under SequenceParallel). The gate's elementwise math is core/math.hpp's,
// run by every backend's map kernel.
#include "strata/core/math.hpp"
#include "strata/core/rules.hpp"
#include "strata/layers/layer.hpp"

namespace strata::layers {

template <int D, int Hidden>
struct SwiGLU {
  static_assert(rule::layer_dim_positive<D, Hidden>::value);
  static constexpr std::string_view name = "SwiGLU";
  static constexpr layer_role role = layer_role::gated_mlp;
  static constexpr int features = D;
  static constexpr int split_extent = Hidden;
  static constexpr shape_t in_shape = shape_v<D>;
  static constexpr shape_t out_shape(shape_t in) { return in; }
  static constexpr std::array<param_t, 3> params{{{"w_gate", shape_v<D, Hidden>, param_role::weight, 1},
                                                  {"w_up", shape_v<D, Hidden>, param_role::weight, 1},
                                                  {"w_down", shape_v<Hidden, D>, param_role::weight, 0}}};
  static constexpr long long rows(shape_t in) { return in.numel() / D; }
  static constexpr long long forward_flops(shape_t in) { return rows(in) * (6LL * D * Hidden + 4LL * Hidden); }
  static constexpr long long backward_flops(shape_t in) { return 2 * forward_flops(in); }

  static constexpr shard_choice shard(const shard_query& q) {
    shard_choice c;
    c.sig = signature::column_row;
    c.need = sbp::broadcast;
    c.out = sbp::partial;
    c.feat_div = q.n;
    c.flops_div = q.n;
    c.partial_input_grad = true;
    c.param_axis = {1, 1, 0, -1, -1, -1};
    if (Hidden % q.n != 0) c.violate(rule_id::split_features, Hidden);
    return c;
  }
  // U(±1/√fan_in): D for the gate and up projections, Hidden for the down projection.
  static double init(const init_site& s) {
    return init_rules::fan_in_uniform(s, s.tensor == 2 ? Hidden : D);
  }
  // The cost model's GEMMs: the two input projections and the output projection.
  static constexpr call_gemms gemms(const local_dims& d) {
    const double h = static_cast<double>(Hidden) / (d.sig == signature::column_row ? d.n : 1);
    const double rows = static_cast<double>(d.rows);
    call_gemms g;
    g.add({2, rows, h, double(D), true});
    g.add({1, rows, double(D), h, true});
    return g;
  }

  // Kept: x; stash: the gate and up products (this device's columns). Scratch:
  // [h | dh | dg | du], each rows × this device's columns.
  static constexpr buffer_needs memory(const local_dims& d) {
    const long long width = d.rows * (d.sig == signature::column_row ? Hidden / d.n : Hidden);
    return {.keep_input = true, .stash_values = 2 * width, .scratch_values = 4 * width};
  }

  template <class C>
  static void forward(C& c) {
    using S = gemm_scalar_t<typename C::value_type>;
    const auto N = backend::trans::N;
    const std::size_t h = local_hidden(c), n = c.rows * h;
    auto* g = c.stash_values;
    auto* u = g + n;
    auto* hid = c.scratch_values;
    gemm(c.q, N, N, c.rows, h, std::size_t(D), S(1), c.x, std::size_t(D), c.w[0], h, S(0), g, h);
    gemm(c.q, N, N, c.rows, h, std::size_t(D), S(1), c.x, std::size_t(D), c.w[1], h, S(0), u, h);
    map(c.q, n, math::swiglu_forward_op{}, hid, static_cast<const typename C::value_type*>(g),
        static_cast<const typename C::value_type*>(u));
    gemm(c.q, N, N, c.rows, std::size_t(D), h, S(1), hid, h, c.w[2], std::size_t(D), S(0), c.y, std::size_t(D));
  }

  // dW_down += hᵀ dy; dh = dy W_downᵀ; dg, du from core/math.hpp; dW_gate += xᵀ dg,
  // dW_up += xᵀ du; dx = dg W_gateᵀ + du W_upᵀ (a partial sum over the devices' columns).
  template <class C>
  static void backward(C& c) {
    using T = typename C::value_type;
    using S = gemm_scalar_t<T>;
    const auto N = backend::trans::N, Tr = backend::trans::T;
    const std::size_t h = local_hidden(c), n = c.rows * h;
    const T* g = c.stash_values;
    const T* u = g + n;
    T* hid = c.scratch_values;
    T* dh = hid + n;
    T* dg = dh + n;
    T* du = dg + n;
    map(c.q, n, math::swiglu_forward_op{}, hid, g, u);  // h again: cheaper than keeping it
    gemm(c.q, Tr, N, h, std::size_t(D), c.rows, S(1), hid, h, c.dy, std::size_t(D), S(1), c.g[2], std::size_t(D));
    gemm(c.q, N, Tr, c.rows, h, std::size_t(D), S(1), c.dy, std::size_t(D), c.w[2], std::size_t(D), S(0), dh, h);
    map(c.q, n, math::swiglu_gate_grad_op{}, dg, g, u, static_cast<const T*>(dh));
    map(c.q, n, math::swiglu_up_grad_op{}, du, g, static_cast<const T*>(dh));
    gemm(c.q, Tr, N, std::size_t(D), h, c.rows, S(1), c.x, std::size_t(D), dg, h, S(1), c.g[0], h);
    gemm(c.q, Tr, N, std::size_t(D), h, c.rows, S(1), c.x, std::size_t(D), du, h, S(1), c.g[1], h);
    if (c.dx) {
      gemm(c.q, N, Tr, c.rows, std::size_t(D), h, S(1), dg, h, c.w[0], h, S(0), c.dx, std::size_t(D));
      gemm(c.q, N, Tr, c.rows, std::size_t(D), h, S(1), du, h, c.w[1], h, S(1), c.dx, std::size_t(D));
    }
  }

 private:
  template <class C>
  static std::size_t local_hidden(const C& c) {
    return std::size_t(c.sig == signature::column_row ? Hidden / c.n : Hidden);
  }
};

}  // namespace strata::layers
