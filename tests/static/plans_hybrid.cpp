// Hybrids: DP × PP × TP on 8 ranks, EPL's colocated Replicate + Split (5.3.1), the
// default strategy with an expert-parallel MoE (5.3.2).
#include <array>

#include <strata/strata.hpp>

using namespace strata;

// DP2 × PP2 × TP2: two pipeline stages, each a Megatron pair over 2 devices.
using H = Plan<Pipeline<Split<2, Linear<128, 256>, ReLU, Linear<256, 128>>, Split<2, Linear<128, 256>, ReLU, Linear<256, 10>>>,
               Loss<SoftmaxCrossEntropy>, MicroBatch<4>, NumMicroBatch<4>, World<8>>;
static_assert(H::valid && H::deadlock_free && H::devices_per_replica == 4 && H::data_parallel() == 2);
// rank = data·4 + stage·2 + tensor index
static_assert(H::coord(6).data == 1 && H::coord(6).stage == 1 && H::coord(6).index == 0);
static_assert(H::coord(5).data == 1 && H::coord(5).stage == 0 && H::coord(5).index == 1);
constexpr bool groups_of_rank_5() {
  std::array<int, 8> g{};
  const int nt = H::group(group_axis::part, 5, 8, g);
  if (nt != 2 || g[0] != 4 || g[1] != 5) return false;
  const int nd = H::group(group_axis::data, 5, 8, g);
  if (nd != 2 || g[0] != 1 || g[1] != 5) return false;
  const int np = H::group(group_axis::pipeline, 5, 8, g);
  return np == 2 && g[0] == 5 && g[1] == 7;
}
static_assert(groups_of_rank_5());
static_assert(H::layer_plans[0].sig == signature::column_parallel && H::layer_plans[2].sig == signature::row_parallel);
static_assert(H::layer_plans[3].sig == signature::column_parallel && H::layer_plans[3].arrives == sbp::partial);
static_assert(H::layer_plans[5].sig == signature::row_parallel);
static_assert(H::bubble == sched::fraction{1, 5});
// stage 0 holds half of each of its two weight matrices
static_assert(H::parameter_bytes(0) == ((128LL * 128 + 128) + (128LL * 128 + 128)) * 4);

// EPL 5.3.1: ResNet-like body data-parallel over 8 devices, the big classifier split over the same 8.
using CO = Plan<Colocate<Replicate<8, Linear<256, 256>, ReLU>, Split<8, Linear<256, 100000>>>, Loss<SoftmaxCrossEntropy>,
                MicroBatch<64>>;
static_assert(CO::valid && CO::stages == 1 && CO::devices_per_replica == 8 && CO::num_taskgraphs == 2);
static_assert(CO::layer_plans[0].sig == signature::data_parallel && CO::layer_plans[0].rows_div == 8);
// body rows gathered for the classifier, and the input gradient reduce-scattered back
constexpr auto& cls = CO::layer_plans[2];
static_assert(cls.sig == signature::column_parallel && cls.arrives == sbp::split_batch);
static_assert(cls.comms[0].kind == collective::all_gather && cls.comms[0].when == pass::forward &&
              cls.comms[0].elems == 64 * 256);
static_assert(cls.comms[1].kind == collective::reduce_scatter && cls.comms[1].when == pass::backward);
static_assert(CO::layer_plans[3].sig == signature::vocab_loss);
static_assert(CO::layer_plans[0].grad_group[0] == group_axis::part_data && cls.grad_group[0] == group_axis::data);
static_assert(CO::parameter_bytes(0) == ((256LL * 256 + 256) + (256LL * 12500 + 12500)) * 4);

// EPL 5.3.2: attention and gating replicated by default over 4 devices, experts split.
using MOE = Plan<Colocate<Embedding<1024, 64>, MultiHeadAttention<64, 8, 16>, Split<4, MoE<8, 64, 256, 2>>, Linear<64, 1024>>,
                 Default<Replicate<4>>, Input<16>, Loss<SoftmaxCrossEntropy>, MicroBatch<8>>;
static_assert(MOE::valid && MOE::num_taskgraphs == 3 && MOE::devices_per_replica == 4);
static_assert(MOE::taskgraphs[0].is_default && !MOE::taskgraphs[1].is_default && MOE::taskgraphs[2].is_default);
constexpr auto& moe = MOE::layer_plans[2];
static_assert(moe.sig == signature::expert_parallel && moe.in_layout == sbp::split_batch);
// dispatch + combine forward, both again backward: every expert's slots (capacity of the
// micro-batch: 125% of 8·16 tokens × top-2 / 8 experts = 40) × D 64
static_assert(moe.comms[0].kind == collective::all_to_all && moe.comms[0].calls == 2 && moe.comms[0].elems == 8 * 40 * 64);
static_assert(moe.comms[1].kind == collective::all_to_all && moe.comms[1].when == pass::backward);
// each device holds 2 of the 8 experts; the gate stays whole and its gradient is reduced over the part
static_assert(moe.local_params[1] == shape_t{3, {2, 64, 256, 0}} && moe.local_params[0] == shape_v<64, 8>);
static_assert(moe.grad_group[0] == group_axis::part_data && moe.grad_group[1] == group_axis::data);

int main() { return 0; }
