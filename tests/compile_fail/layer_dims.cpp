// Rule layer-dims: Linear<784, 0> has zero output features; every layer dimension
// must be positive.
// expected-error: strata rule \[layer-dims\]
// expected-error: layer_dim_positive<(784, 0>|A, B> \[with A=784, B=0\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, Flatten, Linear<784, 0>, ReLU>, Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
