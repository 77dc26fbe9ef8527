// Rule tensor-residual: under 3D each Linear moves the features to another cube axis; the
// residual branch here holds one Linear, so its output cannot be added to its skip.
// expected-error: strata rule \[tensor-residual\]
// expected-error: tensor_3d_residual_even<(2>|Index> \[with (int )?Index ?= ?2\])
#include <strata/strata.hpp>

using namespace strata;

using Net = Split<8, Residual<Linear<16, 16>>, Linear<16, 8>>;
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, Tensor3D, MicroBatch<8>>;
static_assert(P::valid);
