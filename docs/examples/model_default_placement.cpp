// Model<...>: EPL's default placement, every TaskGraph on its own devices.
// A run of unannotated layers is one TaskGraph with the Default strategy.
#include <strata/strata.hpp>

using namespace strata;

using Net = Model<Flatten, Linear<784, 256>, ReLU,     // TaskGraph 0: default Replicate<1>
                  Replicate<1, Linear<256, 256>, ReLU>,  // TaskGraph 1
                  Linear<256, 10>>;                      // TaskGraph 2: default again
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, Input<1, 28, 28>, MicroBatch<32>, NumMicroBatch<4>>;

static_assert(P::num_taskgraphs == 3 && P::num_parts == 3 && P::stages == 3);
static_assert(P::taskgraphs[0].is_default && !P::taskgraphs[1].is_default && P::taskgraphs[2].is_default);
static_assert(P::taskgraphs[0].first_layer == 0 && P::taskgraphs[0].num_layers == 3);
static_assert(P::taskgraphs[2].num_layers == 2);  // Linear<256, 10> and the loss
static_assert(P::devices_per_replica == 3 && P::data_parallel(6) == 2);

// The same plan written as an explicit pipeline.
using Same = Plan<Pipeline<Replicate<1, Flatten, Linear<784, 256>, ReLU>, Replicate<1, Linear<256, 256>, ReLU>,
                           Replicate<1, Linear<256, 10>>>,
                  Loss<SoftmaxCrossEntropy>, Input<1, 28, 28>, MicroBatch<32>, NumMicroBatch<4>>;
static_assert(Same::stages == P::stages && Same::bubble == P::bubble);
static_assert(Same::peak_memory_bytes(0) == P::peak_memory_bytes(0));

// A single bare layer or a single strategy is a one-TaskGraph plan.
static_assert(Plan<Linear<16, 4>, Loss<SoftmaxCrossEntropy>>::num_taskgraphs == 1);

int main() { return 0; }
