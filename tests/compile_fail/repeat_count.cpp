// Rule repeat-count: Repeat<N, Block> writes Block N times, N >= 1. Repeat<0, ...> used to
// plan a model without the block, silently; Repeat<-1, ...> failed inside the standard
// library (g++) or exhausted memory (clang).
// expected-error: strata rule \[repeat-count\]
// expected-error: repeat_count_positive<(0>|N> \[with N=0\])
#include <strata/strata.hpp>

using namespace strata;

using Block = Residual<LayerNorm<16>, Linear<16, 16>>;
using P = Plan<Replicate<1, Linear<8, 16>, Repeat<0, Block>, Linear<16, 4>>, Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
