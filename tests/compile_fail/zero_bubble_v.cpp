// Rule zero-bubble-v: ZeroBubbleV runs stage s's parts s and 2p − 1 − s, so three
// Pipeline parts cannot be placed in a V.
// expected-error: strata rule \[zero-bubble-v\]
// expected-error: zero_bubble_v_parts<(3>|PipelineParts> \[with (int )?PipelineParts ?= ?3\])
#include <strata/strata.hpp>

using namespace strata;

using Net = Pipeline<Replicate<1, Linear<8, 16>, ReLU>, Replicate<1, Linear<16, 16>, ReLU>, Replicate<1, Linear<16, 4>>>;
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, NumMicroBatch<4>, Schedule<ZeroBubbleV>>;
static_assert(P::valid);
