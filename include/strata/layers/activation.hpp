#pragma once
// Pointwise activations (ReLU, GeLU) and Flatten: shape-polymorphic layers without parameters.
#include "strata/layers/layer.hpp"

namespace strata::detail {
template <backend::activation A, long long FwdPerElem, long long BwdPerElem>
struct pointwise {
  static constexpr layer_role role = layer_role::elementwise;
  static constexpr shape_t in_shape{};
  static constexpr shape_t out_shape(shape_t in) { return in; }
  static constexpr std::array<param_t, 0> params{};
  static constexpr long long forward_flops(shape_t in) { return FwdPerElem * in.numel(); }
  static constexpr long long backward_flops(shape_t in) { return BwdPerElem * in.numel(); }
  // The derivative is a function of the input (the pre-activation): it is kept.
  static constexpr buffer_needs memory(const local_dims&) { return {.keep_input = true}; }

  template <class C>
  static void forward(C& c) {
    using T = typename C::value_type;
    bias_activation_forward(c.q, A, c.rows, c.in_cols, c.x, static_cast<const T*>(nullptr), static_cast<T*>(nullptr),
                            c.y);
  }
  template <class C>
  static void backward(C& c) {
    if (c.dx) activation_backward(c.q, A, c.rows * c.in_cols, c.x, c.dy, c.dx);
  }
};
}  // namespace strata::detail

namespace strata::layers {

struct ReLU : detail::pointwise<backend::activation::relu, 1, 1> {
  static constexpr std::string_view name = "ReLU";
};

// tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
struct GeLU : detail::pointwise<backend::activation::gelu, 8, 12> {
  static constexpr std::string_view name = "GeLU";
};

// Flatten: [C, H, W] → [C·H·W]. Row-major bytes do not move: a view, no kernel runs.
struct Flatten {
  static constexpr std::string_view name = "Flatten";
  static constexpr layer_role role = layer_role::reshape;
  static constexpr shape_t in_shape{};
  static constexpr shape_t out_shape(shape_t in) {
    return shape_t{1, {static_cast<int>(in.numel()), 0, 0, 0}};
  }
  static constexpr std::array<param_t, 0> params{};
  static constexpr long long forward_flops(shape_t) { return 0; }
  static constexpr long long backward_flops(shape_t) { return 0; }
  static constexpr buffer_needs memory(const local_dims&) { return {.view = true}; }
  template <class C>
  static void forward(C&) {}
  template <class C>
  static void backward(C&) {}
};

}  // namespace strata::layers
