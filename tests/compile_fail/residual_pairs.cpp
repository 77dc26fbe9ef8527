// Rule residual-pairs: hand-written ResidualBegin / ResidualEnd must pair like brackets;
// here layer 1 ends a residual that never began.
// expected-error: strata rule \[residual-pairs\]
// expected-error: residual_pairs<(1, 0>|Layer, Unclosed> \[with Layer=1, Unclosed=0\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, Linear<16, 16>, layers::ResidualEnd, Linear<16, 4>>, Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
