// Rule attention-heads: MultiHeadAttention<1000, 3, 16> cannot divide a model width
// of 1000 into 3 equal heads (1000 % 3 != 0).
// expected-error: strata rule \[attention-heads\]
// expected-error: attention_heads_divide_dim<(1000, 3>|D, Heads> \[with D=1000, Heads=3\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, MultiHeadAttention<1000, 3, 16>, Linear<1000, 10>>, Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
