// Rule split-features: under Split<3> layer 1, Linear<784, 1000>, runs column-parallel
// and would cut its 1000 output features 3 ways, but 1000 % 3 != 0.
// expected-error: strata rule \[split-features\]
// expected-error: split_features_divisible<(1, 1000, 3>|Index, Features, N> \[with Index=1, Features=1000, N=3\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Split<3, Flatten, Linear<784, 1000>, ReLU, Linear<1000, 30>>, Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
