// Rule context-heads under Context<2, Split<2>> with ContextAllToAll: each tensor-parallel
// device holds 4/2 = 2 query heads but 2/2 = 1 key/value head, which cannot be traded two ways.
// expected-error: strata rule \[context-heads\]
// expected-error: context_heads_divisible<(1, 1, 2>|Layer, Heads, N> \[with Layer=1, Heads=1, N=2\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Context<2, Split<2, Embedding<32, 16>, LlamaAttention<16, 4, 2, 8>, Linear<16, 32>>>, Input<8>,
               Loss<SoftmaxCrossEntropy>, MicroBatch<1>, ContextAllToAll>;
static_assert(P::valid);
