// Data parallelism (EPL 5.1, Colossal-AI's inferred data-parallel size).
// One replica per device; the number of replicas comes from the world size.
#include <strata/strata.hpp>

using namespace strata;

using Mlp = Replicate<1, Flatten, Linear<784, 512>, ReLU, Linear<512, 10>>;
using P = Plan<Mlp, Loss<SoftmaxCrossEntropy>, Input<1, 28, 28>, MicroBatch<32>>;

static_assert(P::num_taskgraphs == 1);
static_assert(P::devices_per_replica == 1);
static_assert(P::data_parallel(8) == 8);            // world 8 -> 8 replicas
static_assert(P::global_batch(8) == 8 * 32 * 1);    // DP x micro-batch x micro-batches
static_assert(P::layer_plans[0].in == shape_v<1, 28, 28>);
static_assert(P::layer_plans[0].out == shape_v<784>);
static_assert(P::layer_plans[1].sig == signature::replicated);      // whole weights everywhere
static_assert(P::layer_plans[1].grad_group[0] == group_axis::data);  // reduced across replicas
static_assert(P::gradient_reduce == reduce_method::mean);

// Replicate<2>: one replica spans two devices that share its micro-batch (16 rows each).
using P2 = Plan<Replicate<2, Flatten, Linear<784, 512>, ReLU, Linear<512, 10>>, Loss<SoftmaxCrossEntropy>,
                Input<1, 28, 28>, MicroBatch<32>>;

static_assert(P2::devices_per_replica == 2);
static_assert(P2::data_parallel(8) == 4);
static_assert(P2::global_batch(8) == 4 * 32);
static_assert(P2::layer_plans[1].sig == signature::data_parallel);
static_assert(P2::layer_plans[1].in_layout == sbp::split_batch);
static_assert(P2::layer_plans[1].rows_div == 2);
// The two devices of a replica saw different rows, so they join the reduction too.
static_assert(P2::layer_plans[1].grad_group[0] == group_axis::part_data);

int main() { return 0; }
