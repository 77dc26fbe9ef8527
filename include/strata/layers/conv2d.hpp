#pragma once
// Conv2d<InC, OutC, K, Stride, Pad, Bias>: a 2D convolution (cross-correlation, as every
// framework computes it) of images [H, W, InC] into [OH, OW, OutC], OH = ⌊(H + 2·Pad − K) /
// Stride⌋ + 1. The filters are [OutC, K, K, InC] (KRSC: PyTorch's weight in channels-last
// order) and the bias [OutC]. Its kernels are the convolution family's conv2d_* (oneDNN
// on the host in float when built with strata::dnnl); else GEMMs over the im2col patch
// matrix [pixels out, K·K·InC] (a 1×1 window moved by 1 without padding reads the input
// as it is):  Y = cols·Wᵀ + b,  dW += dYᵀ·cols,  dcols = dY·W → dX by col2im (a gather).
// PyTorch's default initialisation: weight and bias U(±1/√(InC·K·K)).
// Rules: [conv-window] on the template; [image-input], [image-window] at its place in the
// model; [split-image], [context-image] under those strategies.
#include <array>

#include "strata/core/rules.hpp"
#include "strata/layers/image.hpp"
#include "strata/layers/layer.hpp"

namespace strata::layers {

template <int InC, int OutC, int K, int Stride = 1, int Pad = 0, bool Bias = true>
struct Conv2d {
  static_assert(rule::layer_dim_positive<InC, OutC>::value);
  static_assert(rule::conv_window_valid<K, Stride, Pad>::value);
  static constexpr std::string_view name = "Conv2d";
  static constexpr layer_role role = layer_role::opaque;
  static constexpr bool has_bias = Bias;
  // past a broken [conv-window] (reported above) the plan goes on with a valid window
  static constexpr int k = K > 0 ? K : 1, stride = Stride > 0 ? Stride : 1, pad = Pad > 0 ? Pad : 0;
  static constexpr int patch = k * k * InC;  // one row of the patch matrix
  static constexpr shape_t in_shape = shape_v<InC>;
  static constexpr shape_t out_shape(shape_t in) { return detail::image_out(in, k, k, stride, pad, OutC); }
  static constexpr conv_geometry geometry(shape_t in) { return detail::image_geometry(in, k, k, stride, pad); }
  static constexpr diagnosis input_problem(shape_t in) { return detail::image_problem(in, k, k, pad); }
  static constexpr auto params = [] {
    if constexpr (Bias)
      return std::array<param_t, 2>{{{"weight", shape_v<OutC, k, k, InC>, param_role::weight, -1},
                                     {"bias", shape_v<OutC>, param_role::bias, -1}}};
    else
      return std::array<param_t, 1>{{{"weight", shape_v<OutC, k, k, InC>, param_role::weight, -1}}};
  }();
  static double init(const init_site& s) { return init_rules::fan_in_uniform(s, patch); }

  static constexpr long long out_pixels(shape_t in) { return out_shape(in).numel() / OutC; }
  static constexpr long long forward_flops(shape_t in) { return out_pixels(in) * OutC * (2LL * patch + (Bias ? 1 : 0)); }
  static constexpr long long backward_flops(shape_t in) { return out_pixels(in) * OutC * (4LL * patch + (Bias ? 1 : 0)); }
  static constexpr bool reads_input_as_is(shape_t in) { return in.rank == 3 && geometry(in).identity_patches(); }
  // The input (dW reads its patches again); the patch matrix, or its gradient, in scratch.
  static constexpr buffer_needs memory(const local_dims& d) {
    return {.keep_input = true, .scratch_values = reads_input_as_is(d.in) ? 0 : d.out_rows * patch};  // conv2d_work_values
  }
  static constexpr call_gemms gemms(const local_dims& d) {
    call_gemms g;
    g.add({1, static_cast<double>(d.out_rows), static_cast<double>(OutC), static_cast<double>(patch), true});
    return g;
  }
  static constexpr shard_choice shard(const shard_query& q) { return detail::image_split(q); }
  static constexpr shard_choice context_shard(const shard_query& q) { return detail::image_context(q); }

  template <class C>
  static void forward(C& c) {
    using T = typename C::value_type;
    const T* bias = nullptr;
    if constexpr (Bias) bias = c.w[1];
    conv2d_forward(c.q, detail::images(c.rows, c.in_shape), geometry(c.in_shape), std::size_t(OutC), c.x, c.w[0],
                   bias, c.y, c.scratch_values);
  }
  template <class C>
  static void backward(C& c) {
    using G = typename C::master_type;
    const conv_geometry g = geometry(c.in_shape);
    const std::size_t n = detail::images(c.rows, c.in_shape);
    // dW (into the master-precision gradient) first: the data gradient reuses the work buffer
    G* db = nullptr;
    if constexpr (Bias) db = c.g[1];
    conv2d_backward_weights(c.q, n, g, std::size_t(OutC), c.x, c.dy, c.g[0], db, c.scratch_values);
    if (c.dx) conv2d_backward_data(c.q, n, g, std::size_t(OutC), c.dy, c.w[0], c.dx, c.scratch_values);
  }
};

}  // namespace strata::layers
