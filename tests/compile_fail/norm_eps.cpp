// Rule norm-eps: RMSNorm<64, 0> asks for eps = 10^0 = 1, outside 10^-1 .. 10^-12.
// expected-error: strata rule \[norm-eps\]
// expected-error: norm_eps_exponent<(0>|Exponent> \[with Exponent=0\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, Linear<16, 64>, RMSNorm<64, 0>, Linear<64, 10>>, Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
