// Rule tensor-batch: Tensor3D on Split<8> is a 2 x 2 x 2 cube whose activations are
// split over 2 * 2 = 4 batch shards, but MicroBatch<6> is not divisible by 4.
// expected-error: strata rule \[tensor-batch\]
// expected-error: tensor_batch_divisible<(6, 4>|MicroBatch, Q> \[with MicroBatch=6, Q=4\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Split<8, Linear<784, 1024>, ReLU, Linear<1024, 16>>, Loss<SoftmaxCrossEntropy>, Tensor3D,
               MicroBatch<6>>;
static_assert(P::valid);
