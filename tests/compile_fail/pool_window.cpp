// Rule pool-window: a pooling window padded by more than half its size (a window could
// hold padding only; PyTorch refuses it too).
// compilers: gcc clang
// expected-error: strata rule \[pool-window\]
// expected-error: pool_window_valid<(2, 2, 2>|K, Stride, Pad> \[with K=2, Stride=2, Pad=2\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, MaxPool2d<2, 2, 2>, GlobalAvgPool2d, Linear<1, 2>>, Input<8, 8, 1>,
               Loss<SoftmaxCrossEntropy>, MicroBatch<2>>;
static_assert(P::valid);
