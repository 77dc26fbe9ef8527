// EPL 5.3.1: data-parallel body and tensor-parallel classifier on the same eight
// devices (cluster.colocate_split_and_replicate = True).
#include <strata/strata.hpp>

using namespace strata;

using Body = Replicate<8, Flatten, Linear<3072, 2048>, ReLU, Linear<2048, 2048>, ReLU>;
using Head = Split<8, Linear<2048, 100000>>;
using P = Plan<Colocate<Body, Head>, Loss<SoftmaxCrossEntropy>, Input<3, 32, 32>, MicroBatch<256>>;

static_assert(P::num_taskgraphs == 2 && P::num_parts == 1);
static_assert(P::devices_per_replica == 8);
static_assert(P::data_parallel(16) == 2 && P::global_batch(16) == 2 * 256);

// The body is data parallel inside the replica: each device takes 256 / 8 rows.
static_assert(P::layer_plans[1].sig == signature::data_parallel && P::layer_plans[1].rows_div == 8);
static_assert(P::layer_plans[1].grad_group[0] == group_axis::part_data);

// The head needs every row: all-gather forward, reduce-scatter of the input gradient.
constexpr auto& head = P::layer_plans[5];
static_assert(head.arrives == sbp::split_batch && head.in_layout == sbp::broadcast);
static_assert(head.sig == signature::column_parallel);
static_assert(head.comms[0].kind == collective::all_gather && head.comms[0].when == pass::forward);
static_assert(head.comms[1].kind == collective::reduce_scatter && head.comms[1].when == pass::backward);
static_assert(head.local_params[0] == shape_v<2048, 12500>);
static_assert(head.grad_group[0] == group_axis::data);  // each shard is unique inside the replica
static_assert(P::layer_plans[6].sig == signature::vocab_loss);

// Without Colocate the two TaskGraphs go to different devices (EPL's default): a
// two-stage pipeline that needs 16 devices per replica.
using Apart = Plan<Model<Body, Head>, Loss<SoftmaxCrossEntropy>, Input<3, 32, 32>, MicroBatch<256>>;
static_assert(Apart::num_parts == 2 && Apart::stages == 2 && Apart::devices_per_replica == 16);

int main() { return 0; }
