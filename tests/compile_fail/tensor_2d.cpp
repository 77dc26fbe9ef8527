// Rule tensor-2d: Tensor2D lays Split<N> devices out as a q x q mesh, but Split<8>
// has 8 devices, not a square.
// expected-error: strata rule \[tensor-2d\]
// expected-error: tensor_2d_square<(8>|N> \[with N=8\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Split<8, Linear<784, 1024>, ReLU, Linear<1024, 16>>, Loss<SoftmaxCrossEntropy>, Tensor2D,
               MicroBatch<32>>;
static_assert(P::valid);
