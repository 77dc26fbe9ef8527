// Rule devices-positive: Split<0, ...> asks for zero devices; Replicate<N>/Split<N>
// need N >= 1.
// expected-error: strata rule \[devices-positive\]
// expected-error: device_count_positive<(0>|N> \[with N=0\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Split<0, Flatten, Linear<784, 1000>, ReLU, Linear<1000, 10>>, Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
