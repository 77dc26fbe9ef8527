// Rule repeat-count with a negative count: the rule, not an error inside the standard
// library or the compiler running out of memory.
// expected-error: strata rule \[repeat-count\]
// expected-error: repeat_count_positive<(-1>|N> \[with N=-1\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, Linear<8, 16>, Repeat<-1, ReLU>, Linear<16, 4>>, Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
