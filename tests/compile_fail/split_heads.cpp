// Rule split-heads: Split<3> divides attention heads among 3 devices, but layer 0,
// MultiHeadAttention<512, 8, 16>, has 8 heads (8 % 3 != 0).
// expected-error: strata rule \[split-heads\]
// expected-error: split_heads_divisible<(0, 8, 3>|Index, Heads, N> \[with Index=0, Heads=8, N=3\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Split<3, MultiHeadAttention<512, 8, 16>, Linear<512, 12>>, Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
