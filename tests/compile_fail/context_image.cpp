// Rule context-image: Context<2> would give each device half of every image's pixels.
// compilers: gcc clang
// expected-error: strata rule \[context-image\]
// expected-error: image_needs_whole_samples<(0, 64, 2>|Layer, Pixels, N> \[with Layer=0, Pixels=64, N=2\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Context<2, Conv2d<1, 4, 3, 1, 1>, GlobalAvgPool2d, Linear<4, 2>>, Input<8, 8, 1>,
               Loss<SoftmaxCrossEntropy>, MicroBatch<2>>;
static_assert(P::valid);
