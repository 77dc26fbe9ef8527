// Rule half-reduce-scale: HalfGradientReduce<Scale> divides and multiplies gradients by
// Scale around the fp16 reduction; 100 is not a power of two, so the scaling would round.
// expected-error: strata rule \[half-reduce-scale\]
// expected-error: half_reduce_scale<(100>|Scale> \[with Scale=100\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, Flatten, Linear<784, 100>, ReLU, Linear<100, 10>>, Loss<SoftmaxCrossEntropy>,
               HalfGradientReduce<100>>;
static_assert(P::valid);
