// Rule split-tokens: Split<2> makes MoE<4, 8, 16> (layer 0) expert-parallel, and every
// device routes an equal share of a micro-batch's tokens; MicroBatch<3> of 5-token
// samples has 15 tokens, which do not divide between 2 devices (the all-to-all sizes
// would be truncated).
// expected-error: strata rule \[split-tokens\]
// expected-error: split_tokens_divisible<(0, 15, 2>|Index, Tokens, N> \[with Index=0, Tokens=15, N=2\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Split<2, MoE<4, 8, 16>, Linear<8, 6>>, Input<5, 8>, Loss<SoftmaxCrossEntropy>, MicroBatch<3>>;
static_assert(P::valid);
