// Rule loss-once: the model already ends with SoftmaxCrossEntropy and the plan also
// passes Loss<SoftmaxCrossEntropy>: the loss is given twice (1 in the model, 1 option).
// expected-error: strata rule \[loss-once\]
// expected-error: loss_once<(1, 1>|LossesInModel, LossOptions> \[with LossesInModel=1, LossOptions=1\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, Flatten, Linear<784, 10>, SoftmaxCrossEntropy>, Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
