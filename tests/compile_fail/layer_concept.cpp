// The Layer concept: NoStash is meant as a user layer but lacks
// `static constexpr long long stash_elems(shape_t)`, so the planner cannot cost its
// activation memory; the plan names the missing member.
// expected-error: strata concept Layer: missing .static constexpr long long stash_elems\(shape_t\).
// expected-error: layer_requirements<(NoStash>|L> \[with L=NoStash\])
#include <strata/strata.hpp>

using namespace strata;

struct NoStash {
  static constexpr std::string_view name = "NoStash";
  static constexpr layer_role role = layer_role::opaque;
  static constexpr shape_t in_shape = shape_v<1000>;
  static constexpr shape_t out_shape(shape_t in) { return in; }
  static constexpr std::array<param_t, 0> params{};
  static constexpr long long forward_flops(shape_t in) { return in.numel(); }
  static constexpr long long backward_flops(shape_t in) { return in.numel(); }
};

using P = Plan<Replicate<1, Flatten, Linear<784, 1000>, NoStash, Linear<1000, 10>>, Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
