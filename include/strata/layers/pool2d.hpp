#pragma once
// Pooling over images [H, W, C] (channels last): MaxPool2d<K, Stride, Pad> (padding never
// wins; the winner's index is kept for the backward), AvgPool2d<K, Stride, Pad> (padding
// counted as zeros: PyTorch's count_include_pad) and GlobalAvgPool2d ([H, W, C] → [C], the
// mean of every channel: ResNet's head). Stride defaults to the window, as in PyTorch.
// Rules: [pool-window] on the template; [image-input], [image-window] at its place in the
// model; [split-image], [context-image] under those strategies.
#include <array>

#include "strata/core/rules.hpp"
#include "strata/layers/image.hpp"
#include "strata/layers/layer.hpp"

namespace strata::detail {
// The members the three pools share: no parameters, whole images, one device or a Replicate<N>.
template <int K0, int Stride0, int Pad0>
struct pool_base {
  // past a broken [pool-window] (reported above) the plan goes on with a valid window
  static constexpr int K = K0 > 0 ? K0 : 1, Stride = Stride0 > 0 ? Stride0 : 1;
  static constexpr int Pad = Pad0 >= 0 && 2 * Pad0 <= K ? Pad0 : 0;
  static constexpr layer_role role = layer_role::opaque;
  static constexpr shape_t in_shape{};  // any channels
  static constexpr std::array<param_t, 0> params{};
  static constexpr shape_t out_shape(shape_t in) { return image_out(in, K, K, Stride, Pad, in.last()); }
  static constexpr conv_geometry geometry(shape_t in) { return image_geometry(in, K, K, Stride, Pad); }
  static constexpr diagnosis input_problem(shape_t in) { return image_problem(in, K, K, Pad); }
  static constexpr long long forward_flops(shape_t in) { return out_shape(in).numel() * K * K; }
  static constexpr long long backward_flops(shape_t in) { return out_shape(in).numel() * K * K; }
  static constexpr shard_choice shard(const shard_query& q) { return image_split(q); }
  static constexpr shard_choice context_shard(const shard_query& q) { return image_context(q); }
};
}  // namespace strata::detail

namespace strata::layers {

template <int K, int Stride = K, int Pad = 0>
struct MaxPool2d : detail::pool_base<K, Stride, Pad> {
  static_assert(rule::pool_window_valid<K, Stride, Pad>::value);
  static constexpr std::string_view name = "MaxPool2d";
  // each output's winning pixel (h·W + w), kept for the backward
  static constexpr buffer_needs memory(const local_dims& d) { return {.stash_ids = d.out_rows * d.out_cols}; }
  template <class C>
  static void forward(C& c) {
    const conv_geometry g = MaxPool2d::geometry(c.in_shape);
    maxpool_forward(c.q, detail::images(c.rows, c.in_shape), g, c.x, c.y, c.stash_ids);
  }
  template <class C>
  static void backward(C& c) {
    if (!c.dx) return;
    const conv_geometry g = MaxPool2d::geometry(c.in_shape);
    maxpool_backward(c.q, detail::images(c.rows, c.in_shape), g, c.dy, static_cast<const std::int32_t*>(c.stash_ids),
                     c.dx);
  }
};

template <int K, int Stride = K, int Pad = 0>
struct AvgPool2d : detail::pool_base<K, Stride, Pad> {
  static_assert(rule::pool_window_valid<K, Stride, Pad>::value);
  static constexpr std::string_view name = "AvgPool2d";
  static constexpr buffer_needs memory(const local_dims&) { return {}; }
  template <class C>
  static void forward(C& c) {
    avgpool_forward(c.q, detail::images(c.rows, c.in_shape), AvgPool2d::geometry(c.in_shape), c.x, c.y);
  }
  template <class C>
  static void backward(C& c) {
    if (c.dx) avgpool_backward(c.q, detail::images(c.rows, c.in_shape), AvgPool2d::geometry(c.in_shape), c.dy, c.dx);
  }
};

// [H, W, C] → [C]: the window is the whole image.
struct GlobalAvgPool2d {
  static constexpr std::string_view name = "GlobalAvgPool2d";
  static constexpr layer_role role = layer_role::opaque;
  static constexpr shape_t in_shape{};
  static constexpr std::array<param_t, 0> params{};
  static constexpr shape_t out_shape(shape_t in) { return in.rank == 3 ? shape_t{1, {in.dim[2], 0, 0, 0}} : in; }
  static constexpr conv_geometry geometry(shape_t in) { return detail::image_geometry(in, in.dim[0], in.dim[1], 1, 0); }
  static constexpr diagnosis input_problem(shape_t in) { return detail::image_problem(in, 1, 1, 0); }
  static constexpr long long forward_flops(shape_t in) { return in.numel(); }
  static constexpr long long backward_flops(shape_t in) { return in.numel(); }
  static constexpr buffer_needs memory(const local_dims&) { return {}; }
  static constexpr shard_choice shard(const shard_query& q) { return detail::image_split(q); }
  static constexpr shard_choice context_shard(const shard_query& q) { return detail::image_context(q); }
  template <class C>
  static void forward(C& c) {
    avgpool_forward(c.q, detail::images(c.rows, c.in_shape), geometry(c.in_shape), c.x, c.y);
  }
  template <class C>
  static void backward(C& c) {
    if (c.dx) avgpool_backward(c.q, detail::images(c.rows, c.in_shape), geometry(c.in_shape), c.dy, c.dx);
  }
};

}  // namespace strata::layers
