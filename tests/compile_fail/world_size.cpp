// Rule world-size: one replica uses 4 devices (Split<4>), but World<6> is not a
// multiple of 4.
// expected-error: strata rule \[world-size\]
// expected-error: world_multiple_of_replica<(6, 4>|World, DevicesPerReplica> \[with World=6, DevicesPerReplica=4\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Split<4, Flatten, Linear<784, 1000>, ReLU, Linear<1000, 12>>, Loss<SoftmaxCrossEntropy>, World<6>>;
static_assert(P::valid);
