// Rule auto-stages-schedule: AutoStages<K> cuts one part per stage; Interleaved<2> runs two
// chunks per stage and is not cut automatically yet.
// expected-error: strata rule \[auto-stages-schedule\]
// expected-error: auto_stages_schedule<(2>|Chunks> \[with Chunks=2\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Repeat<4, Linear<16, 16>, ReLU>, AutoStages<2>, Input<16>, Loss<SoftmaxCrossEntropy>, NumMicroBatch<4>,
               Schedule<Interleaved<2>>>;
static_assert(P::valid);
