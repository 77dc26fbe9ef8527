// Rule dropout-rate: Dropout<100> would drop every element (rate 100/100 = 1; the kept
// ones would be scaled by 1/0).
// expected-error: strata rule \[dropout-rate\]
// expected-error: dropout_rate_valid<(100, 100>|Rate, Per> \[with Rate=100, Per=100\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, Linear<16, 64>, GeLU, Dropout<100>, Linear<64, 10>>, Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
