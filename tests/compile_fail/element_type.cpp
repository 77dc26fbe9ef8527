// Rule element-type: Element<T> is the training precision; a 2-byte integer is not one
// (float, double, strata::bf16 and strata::f16 are), and it must not be costed as low precision.
// expected-error: strata rule \[element-type\]
// expected-error: element_type_supported<(short( int)?>|T> \[with T=short( int)?\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, Linear<16, 4>>, Loss<SoftmaxCrossEntropy>, Element<short>>;
static_assert(P::valid);
