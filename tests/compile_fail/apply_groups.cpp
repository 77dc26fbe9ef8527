// Rule apply-groups: the update runs in N groups; ApplyGroups<0> asks for none.
// expected-error: strata rule \[apply-groups\]
// expected-error: apply_groups_positive<(0>|N> \[with N=0\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, Flatten, Linear<784, 100>, ReLU, Linear<100, 10>>, Loss<SoftmaxCrossEntropy>, ApplyGroups<0>>;
static_assert(P::valid);
