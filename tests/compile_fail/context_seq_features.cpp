// Rule context-seq: Context<2> splits every sample's positions, but these samples are plain
// vectors (Input<8> read by a Linear: one row of 8 features, no sequence), so there is nothing
// to split: a layer with one row per sample is refused (only the [Seq] token ids an Embedding
// reads are cut by their columns).
// expected-error: strata rule \[context-seq\]
// expected-error: context_seq_divisible<(0, 1, 4>|Layer, RowsPerSample, Pieces> \[with Layer=0, RowsPerSample=1, Pieces=4\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Context<2, Linear<8, 16>, ReLU, Linear<16, 4>>, Input<8>, Loss<SoftmaxCrossEntropy>, MicroBatch<2>>;
static_assert(P::valid);
