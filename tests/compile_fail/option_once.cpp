// Rule option-once: MicroBatch is given twice (MicroBatch<32> and MicroBatch<64>).
// expected-error: strata rule \[option-once\]
// expected-error: option_once<(strata::MicroBatch<32>, strata::MicroBatch<64> ?>|First, Second> \[with First=strata::MicroBatch<32>, Second=strata::MicroBatch<64>\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, Flatten, Linear<784, 1000>, ReLU, Linear<1000, 10>>, Loss<SoftmaxCrossEntropy>,
               MicroBatch<32>, MicroBatch<64>>;
static_assert(P::valid);
