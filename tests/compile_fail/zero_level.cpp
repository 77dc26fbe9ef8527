// Rule zero-level: Zero<3> asks for parameter partitioning, which is not a level yet;
// Zero<L> needs L = 0 or 1.
// expected-error: strata rule \[zero-level\]
// expected-error: zero_level_known<(3>|Level> \[with Level=3\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<2, Flatten, Linear<784, 100>, ReLU, Linear<100, 10>>, Loss<SoftmaxCrossEntropy>, Zero<3>>;
static_assert(P::valid);
