// Rule auto-stages-schedule: AutoStages<K> plans 1F1B or GPipe; Interleaved<2> (schedule
// kind 2) is not cut automatically yet.
// expected-error: strata rule \[auto-stages-schedule\]
// expected-error: auto_stages_schedule<(2>|ScheduleKind> \[with ScheduleKind=2\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Repeat<4, Linear<16, 16>, ReLU>, AutoStages<2>, Input<16>, Loss<SoftmaxCrossEntropy>, NumMicroBatch<4>,
               Schedule<Interleaved<2>>>;
static_assert(P::valid);
