// Rule interleave-chunks: Schedule<Interleaved<0>> asks for zero model chunks per
// device; Interleaved<V> needs V >= 1.
// expected-error: strata rule \[interleave-chunks\]
// expected-error: interleave_chunks_positive<(0>|Chunks> \[with Chunks=0\])
#include <strata/strata.hpp>

using namespace strata;

using Net = Pipeline<Replicate<1, Flatten, Linear<784, 1000>, ReLU>, Replicate<1, Linear<1000, 10>>>;
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, NumMicroBatch<4>, Schedule<Interleaved<0>>>;
static_assert(P::valid);
