// Rule buckets: Buckets<0> fuses the gradient all-reduce into zero buckets;
// Buckets<N> needs N >= 1.
// expected-error: strata rule \[buckets\]
// expected-error: buckets_positive<(0>|N> \[with N=0\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, Flatten, Linear<784, 1000>, ReLU, Linear<1000, 10>>, Loss<SoftmaxCrossEntropy>,
               Buckets<0>>;
static_assert(P::valid);
