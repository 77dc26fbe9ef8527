// The compile-time analyses: FLOPs and communication per step.
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, Linear<784, 10>>, Loss<SoftmaxCrossEntropy>, MicroBatch<32>, NumMicroBatch<2>>;

// FLOPs: each layer's forward + backward per sample, times micro-batch x micro-batches.
constexpr long long per_sample = Linear<784, 10>::forward_flops(shape_v<784>) +
                                 Linear<784, 10>::backward_flops(shape_v<784>) +
                                 SoftmaxCrossEntropy::forward_flops(shape_v<10>) +
                                 SoftmaxCrossEntropy::backward_flops(shape_v<10>);
static_assert(P::flops_per_replica_step() == per_sample * 32 * 2);
static_assert(P::flops_per_step(/*world*/ 8) == 8 * P::flops_per_replica_step());
static_assert(P::device_flops_per_step(0) == P::flops_per_replica_step());

// Split<4>: each device does a quarter of a column-parallel layer's work.
using S = Plan<Split<4, Linear<784, 16>>, Loss<SoftmaxCrossEntropy>, MicroBatch<32>>;
static_assert(S::layer_plans[0].local_flops_per_sample ==
              (Linear<784, 16>::forward_flops(shape_v<784>) + Linear<784, 16>::backward_flops(shape_v<784>)) / 4);

// Communication: pure data parallelism moves one gradient all-reduce per step, fused into
// Buckets<N> calls, over the data group. communication(stage, dp) takes the data-parallel
// degree; left out (and no World<N>), data-group reductions are listed as for any dp > 1.
static_assert(P::communication(0, /*dp*/ 1).size == 0);  // one replica: nothing to reduce
constexpr auto table = P::communication(0);
static_assert(table.size == 1);
static_assert(table.rows[0].kind == collective::all_reduce && table.rows[0].group == group_axis::data);
static_assert(table.rows[0].bytes == P::parameter_bytes(0) && table.rows[0].calls == P::buckets);
static_assert(P::communication_bytes(0) == (784LL * 10 + 10) * 4);
// Every row is read off the lowered program; a training step moves exactly these bytes
// (the multi-rank tests count them in the communicator), besides the loss's 24-byte books.
static_assert(P::loss_books_bytes == 24);

int main() { return 0; }
