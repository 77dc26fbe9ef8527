// Rule input-axis: a GPT without Input<Seq>. The planner infers the input from the first
// layer (Embedding: one id per sample), so PositionEmbedding<8, 16> (layer 1) receives a
// sequence of 1 where it fixes 8; the rule says to pass Input<dims...>.
// expected-error: strata rule \[input-axis\]
// expected-error: Input<dims...>
// expected-error: input_axis_matches<(1, 1, 8>|Index, Got, Expected> \[with Index=1, Got=1, Expected=8\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, Embedding<256, 16>, PositionEmbedding<8, 16>, Linear<16, 256>>, Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
