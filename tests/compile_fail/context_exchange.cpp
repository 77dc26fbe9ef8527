// Rule context-exchange: ContextAllToAll says how attention exchanges under Context<N>, but the
// plan splits the micro-batch with Replicate<2>, not the sequence.
// expected-error: strata rule \[context-exchange\]
// expected-error: context_exchange_needs_context<(0>|TaskGraph> \[with TaskGraph=0\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<2, Embedding<32, 16>, CausalSelfAttention<16, 4, 8>, Linear<16, 32>>, Input<8>,
               Loss<SoftmaxCrossEntropy>, MicroBatch<2>, ContextAllToAll>;
static_assert(P::valid);
