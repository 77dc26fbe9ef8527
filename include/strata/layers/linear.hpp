#pragma once
// Linear<In, Out, Bias>: y = x·W + b over the last axis; W is [In, Out] row-major.
// Under Split<N> it is Megatron's pair: column-parallel (W cut on Out, input whole,
// output feature-split) and, after a feature-split input, row-parallel (W cut on In,
// output a partial sum reduced by the planner's conversion). Under 2D/2.5D/3D tensor
// parallelism it runs SUMMA or the 3D cube algorithm (layers/linear_mesh.hpp).
#include "strata/core/rules.hpp"
#include "strata/layers/layer.hpp"
#include "strata/layers/linear_mesh.hpp"

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

  static constexpr shard_choice shard(const shard_query& q) {
    shard_choice c;
    c.flops_div = q.n;
    if (q.arrives == sbp::split_feature) {  // after a column-parallel layer: row-parallel
      c.sig = signature::row_parallel;
      c.need = sbp::split_feature;
      c.out = sbp::partial;
      c.feat_div = q.n;
      c.param_axis = {0, -1, -1, -1, -1, -1};  // W on In; the bias whole, added once after the reduction
      if (In % q.n != 0) c.violate(rule_id::split_features, In);
    } else {
      c.sig = signature::column_parallel;
      c.need = sbp::broadcast;
      c.out = sbp::split_feature;
      c.partial_input_grad = true;
      c.param_axis = {1, 0, -1, -1, -1, -1};  // W and b on Out
      if (Out % q.n != 0) c.violate(q.next_is_loss ? rule_id::split_vocab : rule_id::split_features, Out);
    }
    return c;
  }

  // Backward reads the input again (dW = Xᵀ·dY); on one device or a 1D split it runs as
  // two halves under a zero-bubble schedule.
  static constexpr buffer_needs memory(const local_dims& d) {
    if (d.sig == signature::summa_2d || d.sig == signature::tesseract_2p5d) return detail::summa_memory(d);
    if (d.sig == signature::cube_3d) return detail::cube_memory(d);
    return {.keep_input = true, .weight_pass = true};
  }

  template <class C>
  static void forward(C& c) {
    using T = typename C::value_type;
    using S = gemm_scalar_t<T>;
    const T* b = nullptr;
    if constexpr (Bias) b = c.w[1];
    if (c.sig == signature::summa_2d || c.sig == signature::tesseract_2p5d) return detail::summa_forward(c, b);
    if (c.sig == signature::cube_3d) return detail::cube_forward(c, b);
    // A row-parallel layer's outputs are partial sums: its whole bias is added once.
    const T* bias = nullptr;
    if constexpr (Bias) bias = c.sig != signature::row_parallel || c.index == 0 ? c.w[1] : nullptr;
    // the bias rides the GEMM's epilogue where the backend has one (cuBLASLt)
    gemm_bias_act(c.q, backend::trans::N, backend::trans::N, c.rows, c.out_cols, c.in_cols, S(1), c.x, c.in_cols,
                  c.w[0], c.out_cols, S(0), c.y, c.out_cols, bias, backend::activation::none, static_cast<T*>(nullptr));
  }
  template <class C>
  static void backward(C& c) {
    if (c.sig == signature::summa_2d || c.sig == signature::tesseract_2p5d) return detail::summa_backward(c, Bias);
    if (c.sig == signature::cube_3d) return detail::cube_backward(c, Bias);
    backward_weights(c);
    backward_data(c);
  }
  // dX = dY·Wᵀ (1D; the 2D/2.5D/3D algorithms do not split)
  template <class C>
  static void backward_data(C& c) {
    using S = gemm_scalar_t<typename C::value_type>;
    if (c.dx)
      gemm(c.q, backend::trans::N, backend::trans::T, c.rows, c.in_cols, c.out_cols, S(1), c.dy, c.out_cols, c.w[0],
           c.out_cols, S(0), c.dx, c.in_cols);
  }
  // dW += Xᵀ dY straight into the (master-precision) gradient, db += Σ dY
  template <class C>
  static void backward_weights(C& c) {
    using S = gemm_scalar_t<typename C::value_type>;
    gemm(c.q, backend::trans::T, backend::trans::N, c.in_cols, c.out_cols, c.rows, S(1), c.x, c.in_cols, c.dy,
         c.out_cols, S(1), c.g[0], c.out_cols);
    if constexpr (Bias) bias_grad(c.q, c.rows, c.out_cols, c.dy, c.g[1], true);
  }
};

}  // namespace strata::layers
