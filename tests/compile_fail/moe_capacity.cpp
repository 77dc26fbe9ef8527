// Rule moe-capacity: MoE<4, 64, 128, 1, 0> gives every expert a capacity of 0% of its
// share of the tokens: every token would be dropped.
// expected-error: strata rule \[moe-capacity\]
// expected-error: moe_capacity_valid<(0, 10>|CapacityPercent, AuxPercentMille> \[with CapacityPercent=0, AuxPercentMille=10\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, MoE<4, 64, 128, 1, 0>, Linear<64, 10>>, Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
