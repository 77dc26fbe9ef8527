// Rule context-uniform: the first pipeline stage splits the sequence (Context<2>), the second
// holds whole samples (Replicate<2>): the layout would change between the stages.
// expected-error: strata rule \[context-uniform\]
// expected-error: context_everywhere<(1>|TaskGraph> \[with TaskGraph=1\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Pipeline<Context<2, Embedding<32, 16>, CausalSelfAttention<16, 4, 8>>, Replicate<2, Linear<16, 32>>>,
               Input<8>, Loss<SoftmaxCrossEntropy>, MicroBatch<2>, NumMicroBatch<2>>;
static_assert(P::valid);
