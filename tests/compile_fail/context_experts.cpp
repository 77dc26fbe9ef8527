// Rule context-experts: MoE<4, 16, 32, 2> expert-parallel inside Context<2, Split<2>> — its
// routing, capacity and load-balance statistics are the micro-batch's, and each tensor group
// holds half of its tokens.
// expected-error: strata rule \[context-experts\]
// expected-error: context_tensor_without_experts<(1, 2, 2>|Layer, N, T> \[with Layer=1, N=2, T=2\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Context<2, Split<2, Embedding<32, 16>, MoE<4, 16, 32, 2>, Linear<16, 32>>>, Input<8>,
               Loss<SoftmaxCrossEntropy>, MicroBatch<2>>;
static_assert(P::valid);
