// Rule plan-needs-loss: the model ends with Linear<1000, 10> and no Loss<...> option is
// given, so the plan has nothing to train against.
// expected-error: strata rule \[plan-needs-loss\]
// expected-error: plan_needs_loss<(false>|HasLoss> \[with HasLoss=false\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, Flatten, Linear<784, 1000>, ReLU, Linear<1000, 10>>, MicroBatch<32>>;
static_assert(P::valid);
