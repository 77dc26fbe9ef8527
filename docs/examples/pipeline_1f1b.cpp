// Pipeline parallelism (EPL 5.2, OneFlow's pipeline example): four stages, eight
// micro-batches, 1F1B (PreferBackward) against GPipe (PreferForward).
#include <strata/strata.hpp>

using namespace strata;

using Net = Pipeline<Replicate<1, Flatten, Linear<784, 512>, ReLU>,  // stage 0
                     Replicate<1, Linear<512, 512>, ReLU>,           // stage 1
                     Replicate<1, Linear<512, 512>, ReLU>,           // stage 2
                     Replicate<1, Linear<512, 10>>>;                 // stage 3 (+ the loss)

template <class S>
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, Input<1, 28, 28>, MicroBatch<16>, NumMicroBatch<8>, Schedule<S>>;
using OneFOneB = P<PreferBackward>;
using GPipe = P<PreferForward>;

static_assert(OneFOneB::stages == 4 && OneFOneB::devices_per_replica == 4);
static_assert(OneFOneB::data_parallel(16) == 4);              // 16 devices: 4 pipelines
static_assert(OneFOneB::global_batch(16) == 4 * 16 * 8);
static_assert(OneFOneB::deadlock_free && GPipe::deadlock_free);

// Same bubble for both: (p - 1) / (m + p - 1) = 3 / 11.
static_assert(OneFOneB::bubble == sched::fraction{3, 11});
static_assert(GPipe::bubble == sched::fraction{3, 11});

// 1F1B keeps at most p - s micro-batches in flight on stage s; GPipe keeps all m.
static_assert(OneFOneB::peak_in_flight(0) == 4 && OneFOneB::peak_in_flight(3) == 1);
static_assert(GPipe::peak_in_flight(0) == 8 && GPipe::peak_in_flight(3) == 8);
static_assert(2 * OneFOneB::peak_activation_bytes(0) == GPipe::peak_activation_bytes(0));

// Each stage's program ends with the gradient reduction and the optimizer step.
static_assert(OneFOneB::program.at(0, OneFOneB::program.length[0] - 1).kind == sched::op::optimizer_step);

int main() { return 0; }
