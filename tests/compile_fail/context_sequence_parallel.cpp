// Rule context-sequence-parallel: SequenceParallel under Context<2, Split<4>> gives each of a
// context group's two pieces of the sequence to 4/2 devices, but a piece holds one row
// (micro-batch 1 x 4/(2 x 2) positions), which cannot be cut two ways.
// expected-error: strata rule \[context-sequence-parallel\]
// expected-error: context_sequence_parallel_divisible<(1, 4, 2, 1>|Layer, T, Pieces, PieceRows> \[with Layer=1, T=4, Pieces=2, PieceRows=1\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Context<2, Split<4, Embedding<32, 16>, LayerNorm<16>, Linear<16, 32>>>, Input<4>,
               Loss<SoftmaxCrossEntropy>, MicroBatch<1>, SequenceParallel>;
static_assert(P::valid);
