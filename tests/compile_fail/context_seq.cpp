// Rule context-seq: Context<3, ...> gives each device a third of every sample's positions,
// but the sequence (Input<8>: 8 token ids per sample) is not divisible by 3.
// expected-error: strata rule \[context-seq\]
// expected-error: context_seq_divisible<(0, 8, 3>|Layer, RowsPerSample, N> \[with Layer=0, RowsPerSample=8, N=3\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Context<3, Embedding<32, 16>, CausalSelfAttention<16, 4, 8>, Linear<16, 32>>, Input<8>,
               Loss<SoftmaxCrossEntropy>, MicroBatch<1>>;
static_assert(P::valid);
