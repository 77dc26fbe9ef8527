// Rule input-rank: attention (layer 1) after a layer that produces vectors: the model's
// input is [64] (Input<64>), so Linear<64, 64> hands MultiHeadAttention<64, 4, 16> a
// rank-1 input where it needs [16, 64].
// expected-error: strata rule \[input-rank\]
// expected-error: input_rank<(1, 1, 2>|Index, Got, Expected> \[with Index=1, Got=1, Expected=2\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, Linear<64, 64>, MultiHeadAttention<64, 4, 16>, Linear<64, 10>>, Input<64>,
               Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
