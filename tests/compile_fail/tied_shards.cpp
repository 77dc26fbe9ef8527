// Rule tied-shards: the Embedding (layer 0) is cut over the vocabulary by Split<2>, but
// the TiedHead (layer 3) sits in a Replicate<2> part that keeps the whole table: the two
// copies would not be the same block on each device.
// expected-error: strata rule \[tied-shards\]
// expected-error: tied_shards_match<(3, 0>|Index, Owner> \[with Index=3, Owner=0\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Pipeline<Split<2, Embedding<32, 16>, Linear<16, 16>>, Replicate<2, LayerNorm<16>, TiedHead<32, 16>>>,
               Input<4>, Loss<SoftmaxCrossEntropy>, MicroBatch<2>, NumMicroBatch<2>>;
static_assert(P::valid);
