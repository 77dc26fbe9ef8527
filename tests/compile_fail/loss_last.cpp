// Rule loss-last: the loss is layer 2 of 4; a ReLU follows it, but a loss layer must
// end the model.
// expected-error: strata rule \[loss-last\]
// expected-error: loss_last<(2, 4>|Index, NumLayers> \[with Index=2, NumLayers=4\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, Flatten, Linear<784, 10>, SoftmaxCrossEntropy, ReLU>, MicroBatch<32>>;
static_assert(P::valid);
