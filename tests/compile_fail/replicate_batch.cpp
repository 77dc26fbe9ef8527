// Rule replicate-batch: Replicate<4, ...> cuts each micro-batch over 4 devices, but
// MicroBatch<30> is not divisible by 4.
// expected-error: strata rule \[replicate-batch\]
// expected-error: replicate_batch_divisible<(30, 4>|MicroBatch, N> \[with MicroBatch=30, N=4\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<4, Flatten, Linear<784, 1000>, ReLU, Linear<1000, 10>>, Loss<SoftmaxCrossEntropy>,
               MicroBatch<30>>;
static_assert(P::valid);
