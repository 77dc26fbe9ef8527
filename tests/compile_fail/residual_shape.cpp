// Rule residual-shape: y = x + f(x) needs the branch f to return x's shape; here the
// branch Linear<16, 32> turns 16 features into 32.
// expected-error: strata rule \[residual-shape\]
// expected-error: residual_shape<(2, 32, 16>|EndLayer, BranchElems, InputElems> \[with EndLayer=2, BranchElems=32, InputElems=16\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, Residual<Linear<16, 32>>, Linear<32, 4>>, Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
