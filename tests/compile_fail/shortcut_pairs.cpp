// Rule residual-pairs: a hand-written residual with two ShortcutEnds (a skip path ends once).
// compilers: gcc clang
// expected-error: strata rule \[residual-pairs\]
// expected-error: residual_pairs<(4, 0>|Layer, Unclosed> \[with Layer=4, Unclosed=0\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, layers::ResidualBegin, Linear<8, 8>, layers::ShortcutEnd, Linear<8, 8>, layers::ShortcutEnd,
                         Linear<8, 8>, layers::ResidualEnd, Linear<8, 4>>,
               Input<8>, Loss<SoftmaxCrossEntropy>, MicroBatch<2>>;
static_assert(P::valid);
