// A small GPT written with Repeat and Residual, planned under Split<2>: what the planner
// gives the skip connections, what SequenceParallel changes in layouts, collectives and
// memory, and what activation recomputation keeps.
#include <strata/strata.hpp>

using namespace strata;

constexpr int Vocab = 64, Seq = 16, D = 32, Heads = 4;
using Attention = Residual<LayerNorm<D>, CausalSelfAttention<D, Heads, Seq>>;  // x + attn(LN(x))
using MLP = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;  // x + mlp(LN(x))
template <class... Options>
using GPT = Plan<Split<2, Embedding<Vocab, D>, PositionEmbedding<Seq, D>, Repeat<2, Attention, MLP>,  //
                       LayerNorm<D>, Linear<D, Vocab>>,
                 Input<Seq>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>, Options...>;
using TP = GPT<>;                  // Megatron tensor parallelism
using SP = GPT<SequenceParallel>;  // ... with sequence parallelism

// The flat layer list: 2 embeddings, 2 x (4 + 6) block layers, LayerNorm, head, loss.
static_assert(TP::num_layers == 25);
static_assert(TP::labels_per_sample == Seq && TP::classes == Vocab);  // one label per token
// The first block: 2 ResidualBegin, 3 LayerNorm, 4 attention, 5 ResidualEnd,
//                  6 ResidualBegin, 7 LayerNorm, 8 Linear, 9 GeLU, 10 Linear, 11 ResidualEnd.
constexpr int begin = 2, ln = 3, attn = 4, end = 5, fc1 = 8, fc2 = 10, end2 = 11;
static_assert(TP::layer_plans[begin].desc.role == layer_role::residual_begin);
static_assert(TP::layer_plans[end].desc.role == layer_role::residual_end);

// ---- without sequence parallelism: whole activations, one all-reduce per branch -------
constexpr auto& tp_attn = TP::layer_plans[attn];
static_assert(tp_attn.sig == signature::head_parallel);
static_assert(tp_attn.in_layout == sbp::broadcast && tp_attn.out_layout == sbp::partial);
static_assert(tp_attn.num_comms == 1 && tp_attn.comms[0].kind == collective::all_reduce &&
              tp_attn.comms[0].when == pass::backward);  // its input gradient is a partial sum
// The skip is whole (B), the branch a partial sum (P): the ResidualEnd reduces it once.
static_assert(TP::layer_plans[begin].out_layout == sbp::broadcast);
static_assert(TP::layer_plans[end].arrives == sbp::partial && TP::layer_plans[end].in_layout == sbp::broadcast);
static_assert(TP::layer_plans[end].comms[0].kind == collective::all_reduce &&
              TP::layer_plans[end].comms[0].when == pass::forward);
// The MLP is Megatron's pair: column-parallel, then row-parallel into the same ResidualEnd.
static_assert(TP::layer_plans[fc1].sig == signature::column_parallel);
static_assert(TP::layer_plans[fc2].sig == signature::row_parallel && TP::layer_plans[fc2].num_comms == 0);
static_assert(TP::layer_plans[end2].comms[0].kind == collective::all_reduce);

// ---- with SequenceParallel: the row-wise regions hold half the tokens -----------------
static_assert(SP::sequence_parallel);
static_assert(SP::layer_plans[begin].out_layout == sbp::split_batch);  // the skip: half the rows
static_assert(SP::layer_plans[ln].in_layout == sbp::split_batch);
static_assert(SP::lowering::tables.calls[ln].dims.rows * 2 == TP::lowering::tables.calls[ln].dims.rows);
// The attention still needs whole rows: all-gathered forward, reduce-scattered backward ...
constexpr auto& sp_attn = SP::layer_plans[attn];
static_assert(sp_attn.arrives == sbp::split_batch && sp_attn.in_layout == sbp::broadcast);
static_assert(sp_attn.comms[0].kind == collective::all_gather && sp_attn.comms[0].when == pass::forward);
static_assert(sp_attn.comms[1].kind == collective::reduce_scatter && sp_attn.comms[1].when == pass::backward);
// ... and its partial sum is reduce-scattered into the skip's row split, not all-reduced.
constexpr auto& sp_end = SP::layer_plans[end];
static_assert(sp_end.arrives == sbp::partial && sp_end.in_layout == sbp::split_batch);
static_assert(sp_end.comms[0].kind == collective::reduce_scatter && sp_end.comms[0].when == pass::forward);
static_assert(sp_end.comms[1].kind == collective::all_gather && sp_end.comms[1].when == pass::backward);
// The same for the position embedding after the vocabulary-parallel embedding.
static_assert(SP::layer_plans[1].arrives == sbp::partial && SP::layer_plans[1].in_layout == sbp::split_batch);
// Less kept per micro-batch, a smaller activation arena.
static_assert(SP::stash_bytes(0) < TP::stash_bytes(0));
static_assert(SP::activation_arena_bytes(0) < TP::activation_arena_bytes(0));

// ---- activation recomputation ----------------------------------------------------------
using Blocks = GPT<SequenceParallel, GradientCheckpoint<checkpoint_mode::automatic>>;    // every Residual
using Whole = GPT<SequenceParallel, GradientCheckpoint<checkpoint_mode::end_taskgraph>>;  // the TaskGraph
using Marked = Plan<Split<2, Embedding<Vocab, D>, PositionEmbedding<Seq, D>, Checkpoint<Repeat<2, Attention, MLP>>,
                          LayerNorm<D>, Linear<D, Vocab>>,
                    Input<Seq>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>, SequenceParallel>;  // written
static_assert(SP::recompute_regions == 0);
static_assert(Blocks::recompute_regions == 4 && Whole::recompute_regions == 1 && Marked::recompute_regions == 1);
// automatic: one region per Residual; the embeddings and the head are kept
static_assert(Blocks::recompute_region[1] == -1 && Blocks::recompute_region[begin] == 0 &&
              Blocks::recompute_region[end] == 0 && Blocks::recompute_region[end + 1] == 1 &&
              Blocks::recompute_region[22] == -1);
// a region stops before the loss (and before a pipeline part's last layer)
static_assert(Whole::recompute_region[23] == 0 && Whole::recompute_region[24] == -1);
// each recomputed layer's forward runs again in the backward: 2 x (4 + 6) layers, of which
// each ResidualBegin is a view of its input (nothing to run): 2 x (3 + 5) recompute steps
constexpr int recompute_steps() {
  const auto& T = Blocks::lowering::tables;
  int n = 0;
  for (int k = 0; k < T.num_steps; ++k) n += T.steps[k].kind == lower::act::recompute;
  return n;
}
static_assert(recompute_steps() == 2 * (3 + 5));
// What a micro-batch keeps until its backward shrinks; the activation arena too (it now
// holds one region's activations, shared by every region of the stage).
static_assert(Blocks::stash_bytes(0) * 4 < SP::stash_bytes(0));
static_assert(Whole::stash_bytes(0) < Blocks::stash_bytes(0));
static_assert(Blocks::activation_arena_bytes(0) < SP::activation_arena_bytes(0));
// The price: the regions' forward collectives run twice.
static_assert(Blocks::communication_bytes(0, 1) > SP::communication_bytes(0, 1));

int main() { return 0; }
