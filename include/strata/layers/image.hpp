#pragma once
// What the image layers (Conv2d, MaxPool2d, AvgPool2d, GlobalAvgPool2d, BatchNorm2d)
// share: a sample is an image [H, W, C] stored channels last (core/conv_math.hpp says why),
// so its pixels are the rows the executor hands a layer (c.rows = samples × H × W) and the
// channels its columns. They run on one device or data-parallel in a Replicate<N>; a
// channel split under Split<N> (all five) and a pixel split under Context<N> (convolutions
// and pools) are refused by rule.
#include "strata/core/conv_math.hpp"
#include "strata/core/diagnosis.hpp"
#include "strata/core/sbp.hpp"
#include "strata/core/shape.hpp"

namespace strata::detail {

// A window of KH × KW taps moved by `stride` over an input [H, W, C], padded by `pad`.
constexpr conv_geometry image_geometry(shape_t in, int KH, int KW, int stride, int pad) {
  return conv_geometry::of(in.dim[0], in.dim[1], in.dim[2], KH, KW, stride, pad);
}

// The output [OH, OW, channels] of such a window (the input's rank when it is no image:
// rule [image-input] reports it).
constexpr shape_t image_out(shape_t in, int KH, int KW, int stride, int pad, int channels) {
  if (in.rank != 3) return in.with_last(channels);
  return shape_t{3, {conv_out_extent(in.dim[0], KH, stride, pad), conv_out_extent(in.dim[1], KW, stride, pad), channels, 0}};
}

// Rules [image-input] and [image-window]; the planner fills in the layer's index.
constexpr diagnosis image_problem(shape_t in, int KH, int KW, int pad) {
  if (in.rank != 3) return {rule_id::image_input, 0, in.rank};
  if (in.dim[0] + 2 * pad < KH) return {rule_id::image_window, 0, in.dim[0] + 2 * pad, KH};
  if (in.dim[1] + 2 * pad < KW) return {rule_id::image_window, 0, in.dim[1] + 2 * pad, KW};
  return {};
}

// Under Split<N>: rule [split-image]; under Context<N>: rule [context-image].
constexpr shard_choice image_split(const shard_query& q) {
  shard_choice c;
  c.violate(rule_id::split_image, q.in.last());
  return c;
}
constexpr shard_choice image_context(const shard_query& q) {
  shard_choice c;
  c.violate(rule_id::context_image, static_cast<int>(q.in.rows()));
  return c;
}

// The samples of `rows` pixel rows of images of shape `in`.
constexpr std::size_t images(std::size_t rows, shape_t in) {
  return rows / (static_cast<std::size_t>(in.dim[0]) * static_cast<std::size_t>(in.dim[1]));
}

}  // namespace strata::detail
