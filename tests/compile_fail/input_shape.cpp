// Rule input-shape: the first layer, a user-defined 2x pooling layer, accepts any shape
// and changes it, so the Linear<392, 10> after it does not tell the planner what the
// model's input is; the plan should pass Input<784>.
// expected-error: strata rule \[input-shape\]
// expected-error: input_shape_known<(false>|Known> \[with Known=false\])
#include <strata/strata.hpp>

using namespace strata;

struct HalvePool {  // a valid Layer: halves the last axis
  static constexpr std::string_view name = "HalvePool";
  static constexpr layer_role role = layer_role::opaque;
  static constexpr shape_t in_shape{};
  static constexpr shape_t out_shape(shape_t in) { return in.with_last(in.last() / 2); }
  static constexpr std::array<param_t, 0> params{};
  static constexpr long long forward_flops(shape_t in) { return in.numel(); }
  static constexpr long long backward_flops(shape_t in) { return in.numel(); }
  static constexpr buffer_needs memory(const local_dims&) { return {.keep_input = true}; }
};
static_assert(Layer<HalvePool>);

using P = Plan<Replicate<1, HalvePool, Linear<392, 10>>, Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
