// Rule input-rank: a pre-LN attention block without Input<Seq, D>: the plan infers its
// input from LayerNorm<64> as vectors [64], so MultiHeadAttention<64, 4, 16> (layer 1),
// which needs [16, 64], receives a rank-1 input. The rule names the layer and both ranks
// (before this rule, the planner read past the shape's axes and failed deep inside).
// expected-error: strata rule \[input-rank\]
// expected-error: input_rank<(1, 1, 2>|Index, Got, Expected> \[with Index=1, Got=1, Expected=2\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, LayerNorm<64>, MultiHeadAttention<64, 4, 16>, Linear<64, 10>>, Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
