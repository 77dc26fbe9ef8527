// Rule num-micro-batch: NumMicroBatch<0> runs zero micro-batches per step;
// NumMicroBatch<M> needs M >= 1.
// expected-error: strata rule \[num-micro-batch\]
// expected-error: num_micro_batch_positive<(0>|NumMicroBatch> \[with NumMicroBatch=0\])
#include <strata/strata.hpp>

using namespace strata;

using Net = Pipeline<Replicate<1, Flatten, Linear<784, 1000>, ReLU>, Replicate<1, Linear<1000, 10>>>;
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, MicroBatch<32>, NumMicroBatch<0>>;
static_assert(P::valid);
