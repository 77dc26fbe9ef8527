// Rule residual-shape, reported at the residual: the branch Linear<16, 32> returns 32
// features where the skip has 16, and the layer after the residual expects the skip's 16.
// The residual is the layer that breaks, so its rule speaks, not [shapes-chain] at the
// next layer.
// expected-error: strata rule \[residual-shape\]
// expected-error: residual_shape<(2, 32, 16>|EndLayer, BranchElems, InputElems> \[with EndLayer=2, BranchElems=32, InputElems=16\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, Residual<Linear<16, 32>>, Linear<16, 4>>, Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
