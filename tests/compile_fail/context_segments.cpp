// Rule context-segments: SegmentEmbedding counts the separators before each token, but
// Context<2> gives each device half of every sequence's positions.
// expected-error: strata rule \[context-segments\]
// expected-error: segments_need_whole_sequences<(0, 31, 2>|Layer, Sep, N> \[with Layer=0, Sep=31, N=2\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Context<2, SegmentEmbedding<32, 16, 2, 31>, PositionEmbedding<8, 16>, Linear<16, 32>>, Input<8>,
               Loss<SoftmaxCrossEntropy>, MicroBatch<1>>;
static_assert(P::valid);
