// Rule attention-dropout: the attention probabilities' dropout rate is AttnDropout/100, and
// CausalSelfAttention<16, 2, 8, 0, 100> would drop every probability (the kept ones scaled
// by 1/0).
// expected-error: strata rule \[attention-dropout\]
// expected-error: attention_dropout_valid<(100>|Percent> \[with Percent=100\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, CausalSelfAttention<16, 2, 8, 0, 100>, Linear<16, 10>>, Input<8, 16>,
               Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
