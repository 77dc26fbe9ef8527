// Rule interleave-parts: Interleaved<2> puts 2 pipeline parts on every stage, but the
// Pipeline has 3 parts (3 % 2 != 0).
// expected-error: strata rule \[interleave-parts\]
// expected-error: interleave_parts_divisible<(3, 2>|PipelineParts, Chunks> \[with PipelineParts=3, Chunks=2\])
#include <strata/strata.hpp>

using namespace strata;

using Net = Pipeline<Replicate<1, Flatten, Linear<784, 1000>, ReLU>, Replicate<1, Linear<1000, 500>, ReLU>,
                     Replicate<1, Linear<500, 10>>>;
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, NumMicroBatch<4>, Schedule<Interleaved<2>>>;
static_assert(P::valid);
