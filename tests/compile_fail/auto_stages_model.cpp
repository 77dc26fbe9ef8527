// Rule auto-stages-model: AutoStages<K> cuts an unannotated model; this one is already a
// Pipeline.
// expected-error: strata rule \[auto-stages-model\]
// expected-error: auto_stages_model<(false>|Unannotated> \[with Unannotated=false\])
#include <strata/strata.hpp>

using namespace strata;

using Net = Pipeline<Replicate<1, Linear<16, 16>, ReLU>, Replicate<1, Linear<16, 4>>>;
using P = Plan<Net, AutoStages<2>, Input<16>, Loss<SoftmaxCrossEntropy>, NumMicroBatch<4>>;
static_assert(P::valid);
