// Rule shortcut-split: a Residual with a Shortcut<...> under Split<2>.
// compilers: gcc clang
// expected-error: strata rule \[shortcut-split\]
// expected-error: shortcut_not_split<(2, 2, 2>|Layer, Value, N> \[with Layer=2, Value=2, N=2\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Split<2, Residual<Shortcut<Linear<8, 16>>, Linear<8, 16>, ReLU, Linear<16, 16>>, Linear<16, 4>>,
               Input<8>, Loss<SoftmaxCrossEntropy>, MicroBatch<2>>;
static_assert(P::valid);
