// Rule tensor-2.5d: Tensor2p5D<2> lays Split<N> devices out as q x q x 2, but Split<12>
// has 12 devices (12 / 2 = 6 is not a square).
// expected-error: strata rule \[tensor-2\.5d\]
// expected-error: tensor_2p5d_shape<(12, 2>|N, Depth> \[with N=12, Depth=2\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Split<12, Linear<784, 1024>, ReLU, Linear<1024, 16>>, Loss<SoftmaxCrossEntropy>, Tensor2p5D<2>,
               MicroBatch<48>>;
static_assert(P::valid);
