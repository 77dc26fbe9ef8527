// Rule colocate-devices: TaskGraph 1 of the Colocate group, Split<2, ...>, uses 2
// devices but the group's first TaskGraph, Replicate<4, ...>, uses 4; colocated
// TaskGraphs share their devices, so the counts must agree.
// expected-error: strata rule \[colocate-devices\]
// expected-error: colocate_equal_devices<(1, 2, 4>|TaskGraph, Devices, First> \[with TaskGraph=1, Devices=2, First=4\])
#include <strata/strata.hpp>

using namespace strata;

using Net = Colocate<Replicate<4, Flatten, Linear<784, 1000>, ReLU>, Split<2, Linear<1000, 10>>>;
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, MicroBatch<32>>;
static_assert(P::valid);
