// Rule default-strategy: Default<Split<4, ReLU>> names layers; the default strategy
// must be a bare Replicate<N> or Split<N> (here: Default<Split<4>>).
// expected-error: strata rule \[default-strategy\]
// expected-error: default_is_strategy<(strata::Split<4, strata::layers::ReLU> ?>|T> \[with T=strata::Split<4, strata::layers::ReLU>\])
#include <strata/strata.hpp>

using namespace strata;

using Net = Model<Flatten, Linear<784, 1000>, ReLU, Linear<1000, 12>>;
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, Default<Split<4, ReLU>>>;
static_assert(P::valid);
