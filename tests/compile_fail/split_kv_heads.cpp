// Rule split-kv-heads: Split<2> gives each device a contiguous cut of w_qkv's columns, which
// must be whole key/value groups, but layer 0, the multi-query LlamaAttention<64, 8, 1, 16>,
// has 1 key/value head (8 query heads would divide, 1 % 2 != 0).
// expected-error: strata rule \[split-kv-heads\]
// expected-error: split_kv_heads_divisible<(0, 1, 2>|Index, KVHeads, N> \[with Index=0, KVHeads=1, N=2\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Split<2, LlamaAttention<64, 8, 1, 16>, Linear<64, 12>>, Input<16, 64>, Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
