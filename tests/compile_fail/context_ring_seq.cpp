// Rule context-seq: ContextRing passes key/value blocks around the ring with the same causal
// load balance as ContextAllGather, so Context<4, ...> gives each device two pieces of Seq/8
// positions of every sample; the sequence (Input<12>) divides by 4 and not by 8.
// expected-error: strata rule \[context-seq\]
// expected-error: context_seq_divisible<(0, 12, 8>|Layer, RowsPerSample, Pieces> \[with Layer=0, RowsPerSample=12, Pieces=8\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Context<4, Embedding<32, 16>, CausalSelfAttention<16, 4, 12>, Linear<16, 32>>, Input<12>,
               Loss<SoftmaxCrossEntropy>, MicroBatch<1>, ContextRing>;
static_assert(P::valid);
