// A GPT with a mixture-of-experts block (MoE<4, D, 2D, 2> in place of the second
// block's MLP) trained under data parallelism equals the same model on one device
// (strata::verify::against_one_device: every step's loss — cross-entropy plus the
// load-balancing loss —, every parameter, evaluation, bytes per collective against the
// plan, replicas bit for bit): float64 within 1e-9.
//
// Capacity is per device and micro-batch. Replicate<1> × world: each replica's
// micro-batches are the reference's, so routing, capacity and dropping are the same; that
// plan drops tokens on purpose (capacity 50%: 4 slots per expert for a micro-batch's 32
// choices). Replicate<N>, N > 1, cuts a micro-batch's tokens over N devices, so a
// capacity would cover other tokens than on one device: those plans use 200%, where an
// expert can take every local token and nothing is dropped; the routing statistics of
// the load-balancing loss are summed over the N devices (one all-reduce, in the plan).
// mpi-ranks: 2 4
#include "check_one_device.hpp"

#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>

using namespace strata;

namespace {

constexpr int V = 32, S = 8, D = 16, H = 4;
using Attn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>;
using MLP = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;
template <int Capacity>
using Experts = Residual<LayerNorm<D>, MoE<4, D, 2 * D, 2, Capacity>>;
using CE = Loss<SoftmaxCrossEntropy>;

template <template <int, class...> class Strategy, int N, int Capacity, class... Extra>
using gpt = Plan<Strategy<N, Embedding<V, D>, PositionEmbedding<S, D>, Attn, MLP, Attn, Experts<Capacity>, LayerNorm<D>,
                          Linear<D, V>>,
                 Input<S>, CE, Extra...>;

using DP = gpt<Replicate, 1, 50, MicroBatch<2>, NumMicroBatch<2>>;
using R2 = gpt<Replicate, 2, 200, MicroBatch<4>, NumMicroBatch<2>>;
using R4 = gpt<Replicate, 4, 200, MicroBatch<4>>;
// the MoE block alone under Split<N>, the rest data parallel over the same N devices
template <int N>
using EP = Plan<Colocate<Embedding<V, D>, PositionEmbedding<S, D>, Attn, MLP, Attn, Split<N, Experts<50>>, LayerNorm<D>,
                         Linear<D, V>>,
                Default<Replicate<N>>, Input<S>, CE, MicroBatch<4>, NumMicroBatch<2>>;
// the whole model under Split<2>: attention and MLP tensor parallel, the MoE expert parallel
using EP_ALL = gpt<Split, 2, 50, MicroBatch<4>, NumMicroBatch<2>>;
// the MoE in the second stage, recomputed in backward (its loss must count once)
using PP2_RC = Plan<Pipeline<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, Attn, MLP>,
                             Replicate<1, Attn, Experts<50>, LayerNorm<D>, Linear<D, V>>>,
                    Input<S>, CE, MicroBatch<2>, NumMicroBatch<4>, GradientCheckpoint<checkpoint_mode::end_taskgraph>>;

// Every expert is full: 16 tokens × top-2 per micro-batch, 4 slots per expert.
static_assert(layers::MoE<4, D, 2 * D, 2, 50>::capacity(2 * S) == 4);
// Replicate<2>: 16 local tokens, 16 slots per expert — nothing can be dropped.
static_assert(layers::MoE<4, D, 2 * D, 2, 200>::capacity(4 * S / 2) == 4 * S / 2);
// the routing statistics' all-reduce is the plan's: 2 × 4 experts per micro-batch
constexpr auto& moe_r2 = R2::layer_plans[18];
static_assert(moe_r2.desc.role == layer_role::moe && moe_r2.sig == signature::data_parallel);
static_assert(moe_r2.comms[moe_r2.num_comms - 1].kind == collective::all_reduce &&
              moe_r2.comms[moe_r2.num_comms - 1].elems == 8 && moe_r2.comms[moe_r2.num_comms - 1].stats);
static_assert(DP::layer_plans[18].num_comms == 0);

// expert parallel: the capacity is the micro-batch's (4 × 8 tokens, top-2, 50%: 8 slots
// for an expected 16 choices)
// and the dispatch/combine all-to-all moves a [E/N, 8, D] block to each of N devices
static_assert(layers::MoE<4, D, 2 * D, 2, 50>::capacity(4 * S) == 8);
constexpr auto& moe_ep2 = EP<2>::layer_plans[18];
static_assert(moe_ep2.desc.role == layer_role::moe && moe_ep2.sig == signature::expert_parallel);
static_assert(moe_ep2.local_params[1] == shape_t{3, {2, D, 2 * D, 0}});
static_assert(moe_ep2.comms[moe_ep2.num_conversion_comms].kind == collective::all_to_all &&
              moe_ep2.comms[moe_ep2.num_conversion_comms].elems == 4 * 8 * D);

bool world_is(int n) { return mpi_test::world().size() == n; }
const Adam adam{.lr = 1e-2};
const SGD sgd{.lr = 0.1, .momentum = 0.9};

}  // namespace

TEST_CASE("a GPT with an MoE block under data parallelism equals one device") {
  mpi_test::check_one_device<DP>("moe", "Replicate<1> x DP, tokens dropped (Adam)", adam, 1e-9, 6);
  mpi_test::check_one_device<R2>("moe", "Replicate<2> (SGD momentum)", sgd, 1e-9, 6);
  if (world_is(4)) mpi_test::check_one_device<R4>("moe", "Replicate<4> (Adam)", adam, 1e-9, 6);
  mpi_test::check_one_device<EP<2>>("moe", "Split<2> expert parallel, tokens dropped (Adam)", adam, 1e-9, 6);
  if (world_is(4)) mpi_test::check_one_device<EP<4>>("moe", "Split<4> expert parallel, tokens dropped (SGD)", sgd, 1e-9, 6);
  mpi_test::check_one_device<EP_ALL>("moe", "Split<2> whole model, tokens dropped (Adam)", adam, 1e-9, 6);
  mpi_test::check_one_device<PP2_RC>("moe", "2-stage pipeline, MoE recomputed (Adam)", adam, 1e-9, 6);
}
