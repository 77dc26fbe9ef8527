// The Layer concept: NoMemory is meant as a user layer but lacks
// `static constexpr buffer_needs memory(const local_dims&)`, so the planner cannot lay out
// the memory its execution needs; the plan names the missing member.
// expected-error: strata concept Layer: missing .static constexpr strata::buffer_needs memory\(const strata::local_dims&\).
// expected-error: layer_requirements<(NoMemory>|L> \[with L=NoMemory\])
#include <strata/strata.hpp>

using namespace strata;

struct NoMemory {
  static constexpr std::string_view name = "NoMemory";
  static constexpr layer_role role = layer_role::opaque;
  static constexpr shape_t in_shape = shape_v<1000>;
  static constexpr shape_t out_shape(shape_t in) { return in; }
  static constexpr std::array<param_t, 0> params{};
  static constexpr long long forward_flops(shape_t in) { return in.numel(); }
  static constexpr long long backward_flops(shape_t in) { return in.numel(); }
};

using P = Plan<Replicate<1, Flatten, Linear<784, 1000>, NoMemory, Linear<1000, 10>>, Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
