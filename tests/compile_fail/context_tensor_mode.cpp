// Rule context-tensor-mode: Context<2, Split<4>> under Tensor2D — the context split already
// cuts every sample's rows, and a 2D mesh would cut them again over its rows.
// expected-error: strata rule \[context-tensor-mode\]
// expected-error: context_tensor_is_1d<(2>|Mode> \[with Mode=2\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Context<2, Split<4, Embedding<32, 16>, CausalSelfAttention<16, 4, 8>, Linear<16, 32>>>, Input<8>,
               Loss<SoftmaxCrossEntropy>, MicroBatch<2>, Tensor2D>;
static_assert(P::valid);
