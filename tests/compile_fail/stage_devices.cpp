// Rule stage-devices: pipeline stages 0 and 1 use 2 devices each but stage 2,
// Split<4, ...>, uses 4; every stage must use the same number of devices.
// expected-error: strata rule \[stage-devices\]
// expected-error: pipeline_equal_devices<(2, 4, 2>|Stage, Devices, First> \[with Stage=2, Devices=4, First=2\])
#include <strata/strata.hpp>

using namespace strata;

using Net = Pipeline<Replicate<2, Flatten, Linear<784, 1000>, ReLU>, Replicate<2, Linear<1000, 500>, ReLU>,
                     Split<4, Linear<500, 200>, ReLU, Linear<200, 12>>>;
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, MicroBatch<32>, NumMicroBatch<6>>;
static_assert(P::valid);
