// Rule split-rows: under SequenceParallel the LayerNorm after the vocabulary-parallel
// embedding keeps its rows (1 sample x 3 tokens) split over Split<2>'s devices, and 3
// rows do not divide by 2.
// expected-error: strata rule \[split-rows\]
// expected-error: split_rows_divisible<(1, 3, 2>|Layer, Rows, N> \[with Layer=1, Rows=3, N=2\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Split<2, Embedding<64, 16>, LayerNorm<16>, Linear<16, 8>>, Input<3>, Loss<SoftmaxCrossEntropy>,
               MicroBatch<1>, SequenceParallel>;
static_assert(P::valid);
