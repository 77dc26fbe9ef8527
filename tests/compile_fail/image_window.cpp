// Rule image-window: three stride-2 convolutions shrink 8×8 to 1×1, and a 3×3 window
// without padding does not fit the fourth's input.
// compilers: gcc clang
// expected-error: strata rule \[image-window\]
// expected-error: image_window_fits<(3, 1, 3>|Index, Padded, Window> \[with Index=3, Padded=1, Window=3\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, Conv2d<1, 4, 3, 2, 1>, Conv2d<4, 4, 3, 2, 1>, Conv2d<4, 4, 3, 2, 1>, Conv2d<4, 4, 3>,
                         GlobalAvgPool2d, Linear<4, 2>>,
               Input<8, 8, 1>, Loss<SoftmaxCrossEntropy>, MicroBatch<2>>;
static_assert(P::valid);
