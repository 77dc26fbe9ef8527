// Rule no-nesting: Replicate<4, ...> holds Split<2, ...> at position 2 of its list;
// strategies cannot be nested (put them side by side in Pipeline or Colocate).
// expected-error: strata rule \[no-nesting\]
// expected-error: no_nested_strategy<(4, 2>|N, Index> \[with N=4, Index=2\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<4, Flatten, Linear<784, 1000>, Split<2, Linear<1000, 10>>>, Loss<SoftmaxCrossEntropy>,
               MicroBatch<32>>;
static_assert(P::valid);
