// Rule attention-kv-heads: grouped-query attention shares each key/value head among a whole
// group of query heads, and MultiHeadAttention<48, 6, 8, true, 0, 4> cannot share 4
// key/value heads among 6 query heads (6 % 4 != 0).
// expected-error: strata rule \[attention-kv-heads\]
// expected-error: attention_kv_heads_divide_heads<(6, 4>|Heads, KVHeads> \[with Heads=6, KVHeads=4\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, MultiHeadAttention<48, 6, 8, true, 0, 4>, Linear<48, 10>>, Input<8, 48>,
               Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
