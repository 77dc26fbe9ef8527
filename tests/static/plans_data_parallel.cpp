// Data parallelism (EPL 5.1): one replica per device, DP degree from the world size;
// Replicate<N> with N > 1 cuts one replica's micro-batch over N devices.
#include <strata/strata.hpp>

using namespace strata;

using MLP = Replicate<1, Flatten, Linear<784, 512>, ReLU, Linear<512, 10>>;
using DP = Plan<MLP, Loss<SoftmaxCrossEntropy>, MicroBatch<32>, NumMicroBatch<2>>;

static_assert(DP::valid && DP::deadlock_free);
static_assert(DP::devices_per_replica == 1 && DP::stages == 1 && DP::num_taskgraphs == 1);
static_assert(DP::data_parallel(8) == 8);
static_assert(DP::global_batch(8) == 8 * 32 * 2);  // DP × micro-batch × micro-batches
static_assert(DP::num_layers == 5);                // the loss is appended as the last layer
static_assert(DP::input_shape == shape_v<784>);
static_assert(DP::coord(5).data == 5 && DP::coord(5).stage == 0);
// parameters: 784·512 + 512 + 512·10 + 10, all on the one device, gradients all-reduced over data
static_assert(DP::parameter_bytes(0) == (784LL * 512 + 512 + 512 * 10 + 10) * 4);
static_assert(DP::layer_plans[1].grad_group[0] == group_axis::data);
static_assert(DP::layer_plans[1].sig == signature::replicated);
// no pipeline, so no bubble; gradient accumulation runs the micro-batches one after the other
static_assert(DP::bubble == sched::fraction{0, 1});
static_assert(DP::peak_in_flight(0) == 1);
// 2·in·out per sample forward for each Linear, twice that backward, + bias adds
static_assert(DP::flops_per_replica_step() ==
              (DP::layer_plans[0].desc.forward_flops(shape_v<784>) + DP::layer_plans[0].desc.backward_flops(shape_v<784>) +
               (2LL * 784 * 512 + 512) + (4LL * 784 * 512 + 512) + 512 + 512 + (2LL * 512 * 10 + 10) +
               (4LL * 512 * 10 + 10) + 5 * 10 + 2 * 10) *
                  32 * 2);
// a fixed world: DP known at compile time
using DP8 = Plan<MLP, Loss<SoftmaxCrossEntropy>, MicroBatch<32>, World<8>>;
static_assert(DP8::data_parallel() == 8);

// Replicate<4>: one replica on 4 devices, the micro-batch of 64 split into 4 × 16 rows.
using R4 = Plan<Replicate<4, Linear<64, 64>, ReLU, Linear<64, 10>>, Loss<SoftmaxCrossEntropy>, MicroBatch<64>>;
static_assert(R4::devices_per_replica == 4 && R4::data_parallel(8) == 2);
static_assert(R4::layer_plans[0].sig == signature::data_parallel);
static_assert(R4::layer_plans[0].in_layout == sbp::split_batch && R4::layer_plans[0].rows_div == 4);
static_assert(R4::layer_plans[0].num_comms == 0);  // no activation traffic inside the replica
// replicated weights that saw different rows: gradients reduced over the replica's devices and the replicas
static_assert(R4::layer_plans[0].grad_group[0] == group_axis::part_data);
static_assert(R4::communication(0).size == 1 && R4::communication(0).rows[0].group == group_axis::part_data);
static_assert(R4::communication(0).rows[0].bytes == (64LL * 64 + 64 + 64 * 10 + 10) * 4);

// Gradient reduction method and buckets are carried into the plan.
using SUM = Plan<MLP, Loss<SoftmaxCrossEntropy>, GradientReduce<ReduceSum>, Buckets<2>, Element<double>>;
static_assert(SUM::gradient_reduce == reduce_method::sum && SUM::buckets == 2 && SUM::element_bytes == 8);

// Element<bf16>: mixed precision. Weights as FP32 masters + bf16 copies (6 bytes), gradients
// and each Adam moment FP32 (4), activations bf16 (2), the gradient all-reduce in FP32.
using MIX = Plan<MLP, Loss<SoftmaxCrossEntropy>, MicroBatch<32>, NumMicroBatch<2>, Element<bf16>>;
constexpr long long mlp_params = 784LL * 512 + 512 + 512 * 10 + 10;
static_assert(MIX::mixed_precision && !DP::mixed_precision && MIX::element_bytes == 2 && MIX::master_bytes == 4);
static_assert(MIX::parameter_bytes(0) == mlp_params * 6 && MIX::gradient_bytes(0) == mlp_params * 4 &&
              MIX::adam_state_bytes(0) == mlp_params * 8);
static_assert(MIX::peak_activation_bytes(0) * 2 == DP::peak_activation_bytes(0));
static_assert(MIX::communication(0).rows[MIX::communication(0).size - 1].bytes == mlp_params * 4);
static_assert(DP::communication(0).rows[DP::communication(0).size - 1].bytes == mlp_params * 4);
// peak memory: the 18 bytes per parameter, plus every activation buffer the executor allocates
// (the stash, and the work region of transients and scratch: exactly the lowered buffer plan)
static_assert(MIX::peak_memory_bytes(0) == mlp_params * 18 + MIX::activation_arena_bytes(0));
static_assert(MIX::activation_arena_bytes(0) > MIX::peak_activation_bytes(0));

int main() { return 0; }
