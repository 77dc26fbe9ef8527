// Rule split-image: a convolution under Split<2> (no channel split yet); the rule says to
// replicate the image layers and split the classifier.
// compilers: gcc clang
// expected-error: strata rule \[split-image\]
// expected-error: Replicate<N>
// expected-error: image_layers_not_split<(0, 1, 2>|Layer, Channels, N> \[with Layer=0, Channels=1, N=2\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Split<2, Conv2d<1, 4, 3, 1, 1>, GlobalAvgPool2d, Linear<4, 2>>, Input<8, 8, 1>,
               Loss<SoftmaxCrossEntropy>, MicroBatch<2>>;
static_assert(P::valid);
