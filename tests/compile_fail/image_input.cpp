// Rule image-input: a convolution after Flatten receives vectors, not an image [H, W, C].
// compilers: gcc clang
// expected-error: strata rule \[image-input\]
// expected-error: image_input<(1, 1>|Index, Rank> \[with Index=1, Rank=1\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, Flatten, Conv2d<64, 4, 3>, Linear<4, 2>>, Input<8, 8, 1>, Loss<SoftmaxCrossEntropy>,
               MicroBatch<2>>;
static_assert(P::valid);
