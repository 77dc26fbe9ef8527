// Rule loss-scale: DynamicScale<Log2Init, GrowthInterval> needs a growth interval of at
// least one clean step; 0 would grow the scale before any step proved it safe.
// expected-error: strata rule \[loss-scale\]
// expected-error: loss_scale_valid<
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, Flatten, Linear<784, 100>, ReLU, Linear<100, 10>>, Loss<SoftmaxCrossEntropy>,
               LossScale<DynamicScale<16, 0>>>;
static_assert(P::valid);
