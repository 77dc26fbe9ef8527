// Rule micro-batch: MicroBatch<0> gives each replica zero samples per micro-batch;
// MicroBatch<B> needs B >= 1.
// expected-error: strata rule \[micro-batch\]
// expected-error: micro_batch_positive<(0>|MicroBatch> \[with MicroBatch=0\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, Flatten, Linear<784, 1000>, ReLU, Linear<1000, 10>>, Loss<SoftmaxCrossEntropy>,
               MicroBatch<0>>;
static_assert(P::valid);
