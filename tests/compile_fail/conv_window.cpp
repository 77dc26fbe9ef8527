// Rule conv-window: a convolution whose stride is 0.
// compilers: gcc clang
// expected-error: strata rule \[conv-window\]
// expected-error: conv_window_valid<(3, 0, 1>|K, Stride, Pad> \[with K=3, Stride=0, Pad=1\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, Conv2d<1, 4, 3, 0, 1>, GlobalAvgPool2d, Linear<4, 2>>, Input<8, 8, 1>,
               Loss<SoftmaxCrossEntropy>, MicroBatch<2>>;
static_assert(P::valid);
