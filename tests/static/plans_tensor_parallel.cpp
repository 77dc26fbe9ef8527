// Tensor parallelism under Split<N> (EPL 5.3.1, Megatron): the planner derives the
// column→row pairing, vocabulary-parallel classifier and loss, vocabulary-parallel
// embedding and head-parallel attention, with their collectives.
#include <strata/strata.hpp>

using namespace strata;

// Megatron MLP: column-parallel, GeLU on the split features, row-parallel, one all-reduce.
using MLP = Plan<Split<4, Linear<512, 2048>, GeLU, Linear<2048, 512>>, Loss<SoftmaxCrossEntropy>, MicroBatch<8>>;
static_assert(MLP::valid && MLP::devices_per_replica == 4 && MLP::data_parallel(8) == 2);
constexpr auto& m0 = MLP::layer_plans[0];
constexpr auto& m1 = MLP::layer_plans[1];
constexpr auto& m2 = MLP::layer_plans[2];
constexpr auto& m3 = MLP::layer_plans[3];
static_assert(m0.sig == signature::column_parallel && m0.in_layout == sbp::broadcast && m0.out_layout == sbp::split_feature);
static_assert(m1.sig == signature::pointwise && m1.in_layout == sbp::split_feature);
static_assert(m2.sig == signature::row_parallel && m2.in_layout == sbp::split_feature && m2.out_layout == sbp::partial);
// column: W [512, 2048/4] + bias [2048/4]; row: W [2048/4, 512] + whole bias
static_assert(m0.local_params[0] == shape_v<512, 512> && m0.local_params[1] == shape_v<512>);
static_assert(m2.local_params[0] == shape_v<512, 512> && m2.local_params[1] == shape_v<512>);
static_assert(m0.num_comms == 0 && m1.num_comms == 0 && m2.num_comms == 0);  // the input needs no gradient
// the partial sums meet the loss: exactly one forward all-reduce of 8×512 over the TaskGraph
static_assert(m3.num_comms == 1 && m3.comms[0].kind == collective::all_reduce && m3.comms[0].elems == 8 * 512 &&
              m3.comms[0].when == pass::forward && m3.comms[0].group == group_axis::part);
// sharded weights: gradients reduced over data replicas only
static_assert(m0.grad_group[0] == group_axis::data && m2.grad_group[0] == group_axis::data);

// Megatron block inside a model: the backward all-reduce appears at the column input.
using BLOCK = Plan<Split<2, LayerNorm<256>, Linear<256, 1024>, GeLU, Linear<1024, 256>, LayerNorm<256>, Linear<256, 10>>,
                   Loss<SoftmaxCrossEntropy>, MicroBatch<4>>;
constexpr auto& b1 = BLOCK::layer_plans[1];
constexpr auto& b4 = BLOCK::layer_plans[4];
static_assert(b1.sig == signature::column_parallel && b1.num_comms == 1 && b1.comms[0].kind == collective::all_reduce &&
              b1.comms[0].when == pass::backward);
static_assert(b4.arrives == sbp::partial && b4.in_layout == sbp::broadcast && b4.comms[0].kind == collective::all_reduce &&
              b4.comms[0].when == pass::forward);
static_assert(BLOCK::layer_plans[0].grad_group[0] == group_axis::data);  // LayerNorm on identical rows

// A split classifier with SoftmaxCrossEntropy comes out vocabulary-parallel.
using VOCAB = Plan<Split<8, Linear<1024, 32000>>, Loss<SoftmaxCrossEntropy>, MicroBatch<16>>;
static_assert(VOCAB::layer_plans[0].sig == signature::column_parallel);
static_assert(VOCAB::layer_plans[0].local_params[0] == shape_v<1024, 4000>);
static_assert(VOCAB::layer_plans[1].sig == signature::vocab_loss && VOCAB::layer_plans[1].in_layout == sbp::split_feature);
// max, sum of exponentials and the target logit: three all-reduces of one value per row
static_assert(VOCAB::layer_plans[1].comms[0].kind == collective::all_reduce &&
              VOCAB::layer_plans[1].comms[0].elems == 16 && VOCAB::layer_plans[1].comms[0].calls == 3);
static_assert(VOCAB::parameter_bytes(0) == (1024LL * 4000 + 4000) * 4);

// Vocabulary-parallel embedding and head-parallel attention.
using LM = Plan<Split<4, Embedding<50000, 256>, MultiHeadAttention<256, 8, 128>, Linear<256, 50000>>, Input<128>,
                Loss<SoftmaxCrossEntropy>, MicroBatch<2>>;
constexpr auto& e0 = LM::layer_plans[0];
constexpr auto& a1 = LM::layer_plans[1];
static_assert(e0.sig == signature::vocab_embedding && e0.local_params[0] == shape_v<12500, 256> &&
              e0.out_layout == sbp::partial);
static_assert(a1.sig == signature::head_parallel && a1.arrives == sbp::partial && a1.local_params[0] == shape_v<256, 192>);
static_assert(a1.comms[0].kind == collective::all_reduce && a1.comms[0].elems == 2LL * 128 * 256);
static_assert(LM::layer_plans[2].sig == signature::column_parallel && LM::layer_plans[3].sig == signature::vocab_loss);

int main() { return 0; }
