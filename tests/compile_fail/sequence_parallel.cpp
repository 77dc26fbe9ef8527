// Rule sequence-parallel: SequenceParallel on a Split<2> TaskGraph where no layer takes a
// partial sum as a row split — the row-parallel Linear<32, 8> hands its partial sum to the
// loss, which reduces it whole — so the option would change nothing; it is refused rather
// than accepted silently.
// expected-error: strata rule \[sequence-parallel\]
// expected-error: sequence_parallel_acts<(0>|FirstSplitLayer> \[with FirstSplitLayer=0\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Split<2, LayerNorm<16>, Linear<16, 32>, GeLU, Linear<32, 8>>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>,
               SequenceParallel>;
static_assert(P::valid);
