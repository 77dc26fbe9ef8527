// Rule auto-stages-count: AutoStages<9> cannot cut a model of 8 units (Linear and ReLU in each of the 4 copies of
// Repeat<4, ...>) into 9 stages.
// expected-error: strata rule \[auto-stages-count\]
// expected-error: auto_stages_count<(9, 8>|Stages, Units> \[with Stages=9, Units=8\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Repeat<4, Linear<16, 16>, ReLU>, AutoStages<9>, Input<16>, Loss<SoftmaxCrossEntropy>, NumMicroBatch<8>>;
static_assert(P::valid);
