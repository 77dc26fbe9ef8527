// Rule tied-once: layers 1 and 2 are both TiedHead<16, 16> over the one Embedding<16, 16>;
// a model holds at most one tied parameter.
// expected-error: strata rule \[tied-once\]
// expected-error: tied_once<(2, 1>|Index, First> \[with Index=2, First=1\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, Embedding<16, 16>, TiedHead<16, 16>, TiedHead<16, 16>>, Input<4>, Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
