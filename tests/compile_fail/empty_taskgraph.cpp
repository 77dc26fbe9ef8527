// Rule empty-taskgraph: the third TaskGraph of the Model (index 2), Replicate<1>, has
// no layers.
// expected-error: strata rule \[empty-taskgraph\]
// expected-error: taskgraph_not_empty<(2>|TaskGraph> \[with TaskGraph=2\])
#include <strata/strata.hpp>

using namespace strata;

using Net = Model<Replicate<1, Flatten, Linear<784, 1000>>, Replicate<1, ReLU>, Replicate<1>,
                  Replicate<1, Linear<1000, 10>>>;
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, NumMicroBatch<8>>;
static_assert(P::valid);
