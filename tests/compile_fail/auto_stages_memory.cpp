// Rule auto-stages-memory: 8 blocks of Linear<1024, 1024> (4 MiB of float weights each,
// 16 MiB with gradients and Adam's two moments) cannot be cut into 2 stages of at most
// 32 MiB: the cut with the smallest fullest stage needs 65 MiB.
// expected-error: strata rule \[auto-stages-memory\]
// expected-error: auto_stages_memory<(2, 65, 32>|Stages, NeededMiB, BudgetMiB> \[with Stages=2, NeededMiB=65(LL)?, BudgetMiB=32(LL)?\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Repeat<8, Linear<1024, 1024>, ReLU>, AutoStages<2>, MemoryBudget<32>, Input<1024>,
               Loss<SoftmaxCrossEntropy>, MicroBatch<8>, NumMicroBatch<4>>;
static_assert(P::valid);
