// Rule segment-separator: SegmentEmbedding<32, 16, 2, 40> counts separator tokens of id 40,
// which a vocabulary of 32 never holds.
// expected-error: strata rule \[segment-separator\]
// expected-error: segment_separator_in_vocabulary<(40, 32>|Sep, Vocab> \[with Sep=40, Vocab=32\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, SegmentEmbedding<32, 16, 2, 40>, Linear<16, 32>>, Input<8>, Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
