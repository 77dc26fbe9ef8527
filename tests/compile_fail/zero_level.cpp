// Rule zero-level: ZeRO has levels 0 to 3 (optimizer state, gradients, parameters);
// Zero<4> names none of them.
// expected-error: strata rule \[zero-level\]
// expected-error: zero_level_known<(4>|Level> \[with Level=4\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<2, Flatten, Linear<784, 100>, ReLU, Linear<100, 10>>, Loss<SoftmaxCrossEntropy>, Zero<4>>;
static_assert(P::valid);
