// Rule context-heads: ContextAllToAll hands each of Context<4>'s devices a quarter of the
// heads for the whole sequence, but the attention has 2 key/value heads.
// expected-error: strata rule \[context-heads\]
// expected-error: context_heads_divisible<(1, 2, 4>|Layer, Heads, N> \[with Layer=1, Heads=2, N=4\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Context<4, Embedding<32, 16>, LlamaAttention<16, 4, 2, 8>, Linear<16, 32>>, Input<8>,
               Loss<SoftmaxCrossEntropy>, MicroBatch<1>, ContextAllToAll>;
static_assert(P::valid);
