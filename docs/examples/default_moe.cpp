// EPL 5.3.2 (MoE transformer): unannotated layers take the default strategy
// Replicate<N>; the experts are Split<N> and become expert parallel; everything is
// colocated on the same N devices.
#include <strata/strata.hpp>

using namespace strata;

constexpr int N = 4, D = 512, Seq = 128;
using Net = Colocate<Embedding<32000, D>, LayerNorm<D>, MultiHeadAttention<D, 8, Seq>,  // attention and gating
                     LayerNorm<D>, Split<N, MoE</*experts*/ 16, D, /*hidden*/ 2048, /*top-k*/ 2>>,
                     LayerNorm<D>, Linear<D, 32000>>;
using P = Plan<Net, Default<Replicate<N>>, Input<Seq>, Loss<SoftmaxCrossEntropy>, MicroBatch<8>>;

// Three TaskGraphs: default, Split, default; one part on N devices.
static_assert(P::num_taskgraphs == 3 && P::num_parts == 1 && P::devices_per_replica == N);
static_assert(P::taskgraphs[0].is_default && P::taskgraphs[0].kind == strategy_kind::replicate);
static_assert(P::taskgraphs[1].kind == strategy_kind::split && !P::taskgraphs[1].is_default);
static_assert(P::taskgraphs[2].is_default);

// Default layers are data parallel inside the replica (8 / 4 = 2 sequences each).
static_assert(P::layer_plans[2].sig == signature::data_parallel && P::layer_plans[2].rows_div == N);

// The MoE layer: 16 / 4 = 4 experts per device, gate replicated, tokens moved by all-to-all.
constexpr auto& moe = P::layer_plans[4];
static_assert(moe.sig == signature::expert_parallel);
static_assert(moe.in_layout == sbp::split_batch && moe.out_layout == sbp::split_batch);
static_assert(moe.local_params[0] == shape_v<D, 16>);                   // gate
static_assert(moe.local_params[1] == shape_t{3, {4, D, 2048, 0}});       // w_in of 4 experts
static_assert(moe.grad_group[0] == group_axis::part_data && moe.grad_group[1] == group_axis::data);
// dispatch + combine, forward and backward: a [16/N experts, C, D] block to every device,
// C = the micro-batch's capacity (125% of 8·Seq tokens × top-2 over 16 experts); the
// routing counts and probability sums all-gathered once per forward
constexpr long long cap = 125LL * 8 * Seq * 2 / (100 * 16);
static_assert(moe.num_comms == 3);
static_assert(moe.comms[0].kind == collective::all_to_all && moe.comms[0].when == pass::forward);
static_assert(moe.comms[0].calls == 2 && moe.comms[0].elems == 16 * cap * D);
static_assert(moe.comms[1].kind == collective::all_to_all && moe.comms[1].when == pass::backward);
static_assert(moe.comms[2].kind == collective::all_gather && moe.comms[2].stats);

int main() { return 0; }
