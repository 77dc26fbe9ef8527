#pragma once
// Dropout<Rate, Per = 100>: in training y = x · keep / (1 − p) with p = Rate/Per, in
// evaluation y = x. The mask is not drawn from a stream but computed from the element's
// global coordinates (core/random.hpp): the run's seed, the training step, the layer's index
// in the flat model, the sample's index in the step's global batch, the row within the sample
// (a token's position) and the feature. So every plan of a model drops the same elements —
// under data, tensor, sequence and pipeline parallelism alike — and equals one device with
// dropout on; a recomputed forward draws the same mask, and the backward recomputes the mask
// instead of keeping it (nothing is stashed).
//
// It is an elementwise layer: under Split<N> any split passes through, with the global
// feature index col0 + c under a feature split, and a partial sum is reduced first (a mask
// applied to partial sums would not be the mask of their sum). Dropout<0> is a view.
// Rule [dropout-rate].
#include <cstdint>

#include "strata/core/random.hpp"
#include "strata/core/rules.hpp"
#include "strata/layers/layer.hpp"

namespace strata::layers {

template <int Rate, int Per = 100>
struct Dropout {
  static_assert(rule::dropout_rate_valid<Rate, Per>::value);
  static constexpr std::string_view name = "Dropout";
  static constexpr layer_role role = layer_role::elementwise;
  static constexpr double rate = double(Rate) / double(Per);
  // dropped iff the element's hash < threshold = floor(rate · 2^64)
  static constexpr std::uint64_t threshold = dropout_threshold(std::uint64_t(Rate), std::uint64_t(Per));
  static constexpr double scale = double(Per) / double(Per - Rate);
  static constexpr shape_t in_shape{};
  static constexpr shape_t out_shape(shape_t in) { return in; }
  static constexpr std::array<param_t, 0> params{};
  static constexpr long long forward_flops(shape_t in) { return Rate == 0 ? 0 : in.numel(); }
  static constexpr long long backward_flops(shape_t in) { return Rate == 0 ? 0 : in.numel(); }
  static constexpr buffer_needs memory(const local_dims&) { return {.view = Rate == 0}; }

  // Piece h of this call's rows at its global coordinates (exec/context.hpp: one piece but
  // under ContextAllGather and ContextRing).
  template <class C>
  static backend::dropout_args mask(const C& c, int h) {
    return {.key = c.step_key, .site = c.site, .sample0 = c.sample0, .row0 = c.row0,
            .sample_rows = c.sample_rows / std::size_t(c.pieces()), .col0 = c.col0, .pos0 = c.piece_pos0(h),
            .threshold = threshold, .scale = scale};
  }
  template <class C, class T>
  static void apply(C& c, const T* x, T* y) {
    const std::size_t rows = c.rows / std::size_t(c.pieces()), at = rows * c.in_cols;
    for (int h = 0; h < c.pieces(); ++h)
      dropout(c.q, mask(c, h), rows, c.in_cols, x + std::size_t(h) * at, y + std::size_t(h) * at);
  }
  template <class C>
  static void forward(C& c) {
    if constexpr (Rate > 0) {  // Dropout<0> is a view: nothing runs
      if (c.training) apply(c, c.x, c.y);
      else copy(c.q, c.rows * c.in_cols, c.x, c.y);
    }
  }
  // The same mask on the gradient, recomputed from the coordinates.
  template <class C>
  static void backward(C& c) {
    if constexpr (Rate > 0)
      if (c.dx) apply(c, c.dy, c.dx);
  }
};

}  // namespace strata::layers
