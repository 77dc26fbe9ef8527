// Rule tensor-3d: Tensor3D lays Split<N> devices out as a q x q x q cube, but Split<9>
// has 9 devices, not a cube.
// expected-error: strata rule \[tensor-3d\]
// expected-error: tensor_3d_cube<(9>|N> \[with N=9\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Split<9, Linear<784, 1024>, ReLU, Linear<1024, 16>>, Loss<SoftmaxCrossEntropy>, Tensor3D,
               MicroBatch<36>>;
static_assert(P::valid);
