// Rule tensor-zero: ZeRO partitions each gradient-reduction group over its devices, but a
// 2D plan reduces gradients over mesh columns as well as replicas; Zero<1> with Tensor2D
// is refused.
// expected-error: strata rule \[tensor-zero\]
// expected-error: tensor_mode_without_zero<(2, 1>|Mode, ZeroLevel> \[with (int )?Mode ?= ?2[;,] (int )?ZeroLevel ?= ?1\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Split<4, Linear<64, 64>, ReLU, Linear<64, 16>>, Loss<SoftmaxCrossEntropy>, Tensor2D, Zero<1>,
               MicroBatch<8>>;
static_assert(P::valid);
