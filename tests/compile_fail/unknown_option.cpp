// Rule unknown-option: PreferForward is passed bare instead of Schedule<PreferForward>;
// it is not a Plan option.
// expected-error: strata rule \[unknown-option\]
// expected-error: is_known_option<(strata::PreferForward>|Option> \[with Option=strata::PreferForward\])
#include <strata/strata.hpp>

using namespace strata;

using Net = Pipeline<Replicate<1, Flatten, Linear<784, 1000>, ReLU>, Replicate<1, Linear<1000, 10>>>;
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, NumMicroBatch<4>, PreferForward>;
static_assert(P::valid);
