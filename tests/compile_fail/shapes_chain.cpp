// Rule shapes-chain: layer 2, Linear<999, 10>, expects 999 input features, but the
// layers before it (Linear<784, 1000>, ReLU) produce 1000.
// expected-error: strata rule \[shapes-chain\]
// expected-error: shapes_chain<(2, 1000, 999>|Index, Produced, Expected> \[with Index=2, Produced=1000, Expected=999\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, Linear<784, 1000>, ReLU, Linear<999, 10>>, Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
