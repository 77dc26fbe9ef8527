// Rule no-nesting (groups): a Pipeline given as a part of another Pipeline. The rule
// names the item (0) instead of a strategy's meaningless device count.
// expected-error: strata rule \[no-nesting\]
// expected-error: nested_group<(0>|Index> \[with Index=0\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Pipeline<Pipeline<Replicate<1, Linear<8, 8>>>, Replicate<1, Linear<8, 4>>>, Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
