// Rule interleave-micro-batches: 6 Pipeline parts with Interleaved<2> make 3 stages;
// the interleaved schedule advances micro-batches in groups of 3, but NumMicroBatch<4>
// is not a multiple of 3.
// expected-error: strata rule \[interleave-micro-batches\]
// expected-error: interleave_micro_batches<(4, 3>|NumMicroBatch, Stages> \[with NumMicroBatch=4, Stages=3\])
#include <strata/strata.hpp>

using namespace strata;

using Net = Pipeline<Replicate<1, Flatten, Linear<784, 1000>, ReLU>, Replicate<1, Linear<1000, 1000>, ReLU>,
                     Replicate<1, Linear<1000, 1000>, ReLU>, Replicate<1, Linear<1000, 1000>, ReLU>,
                     Replicate<1, Linear<1000, 500>, ReLU>, Replicate<1, Linear<500, 10>>>;
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, NumMicroBatch<4>, Schedule<Interleaved<2>>>;
static_assert(P::valid);
