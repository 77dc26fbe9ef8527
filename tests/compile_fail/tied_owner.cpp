// Rule tied-owner: layer 2, TiedHead<40, 16>, reads an Embedding<40, 16>'s table, but
// the model's Embedding is Embedding<32, 16>: no layer matches.
// expected-error: strata rule \[tied-owner\]
// expected-error: tied_owner_unique<(2, 0>|Index, Matches> \[with Index=2, Matches=0\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, Embedding<32, 16>, Linear<16, 16>, TiedHead<40, 16>>, Input<4>, Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
