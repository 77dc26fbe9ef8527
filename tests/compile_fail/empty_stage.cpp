// Rule empty-stage: pipeline part 2 is an empty Colocate<>, a stage with no layers.
// expected-error: strata rule \[empty-stage\]
// expected-error: stage_not_empty<(2>|Stage> \[with Stage=2\])
#include <strata/strata.hpp>

using namespace strata;

using Net = Pipeline<Replicate<1, Flatten, Linear<784, 1000>>, Replicate<1, ReLU>, Colocate<>,
                     Replicate<1, Linear<1000, 10>>>;
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, NumMicroBatch<8>>;
static_assert(P::valid);
