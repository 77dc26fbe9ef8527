// Transformer plans at compile time: what sequence parallelism and activation
// recomputation do to the lowered buffer plan.
#include <strata/strata.hpp>

using namespace strata;

namespace {

constexpr int V = 64, S = 16, D = 32, H = 4;
using Attn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>;
using MLP = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;
template <int N, class... Extra>
using gpt = Plan<Split<N, Embedding<V, D>, PositionEmbedding<S, D>, Repeat<3, Attn, MLP>, LayerNorm<D>, Linear<D, V>>,
                 Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>, Extra...>;

// Elements a micro-batch keeps (act pool) for the layers that work row by row: the
// LayerNorms and the residual adds — their kept inputs and their stashes.
template <class P>
constexpr long long row_region_elems() {
  const auto& T = P::lowering::tables;
  long long e = 0;
  for (int i = 0; i < P::num_layers; ++i) {
    const layer_role r = P::layer_plans[i].desc.role;
    if (r != layer_role::layernorm && r != layer_role::residual_begin && r != layer_role::residual_end) continue;
    const auto& c = T.calls[i];
    if (c.x.where == lower::pool::act && r != layer_role::residual_end) e += c.x.elems;
    for (const lower::buf& b : {c.stash_values, c.stash_stats})
      if (b.where == lower::pool::act) e += b.elems;
  }
  return e;
}

// Flash attention keeps no [Seq, Seq] probabilities: the attention layer's stash (q, k, v,
// the context twice, one log-sum-exp per token and head) and its scratch grow 4x per 4x
// of Seq, from 1k to 32k tokens, and so does the whole plan's peak of activations.
template <int Seq>
using long_context = Plan<Replicate<1, Embedding<V, D>, PositionEmbedding<Seq, D>, CausalSelfAttention<D, H, Seq>,
                                    LayerNorm<D>, Linear<D, V>>,
                          Input<Seq>, Loss<SoftmaxCrossEntropy>, MicroBatch<1>>;
template <class P>
constexpr long long attention_stash_elems() {
  for (int i = 0; i < P::num_layers; ++i)
    if (P::layer_plans[i].desc.role == layer_role::attention) {
      const auto& c = P::lowering::tables.calls[i];
      return c.stash_values.elems + c.stash_stats.elems;
    }
  return -1;
}
static_assert(attention_stash_elems<long_context<1024>>() == 1024 * (5 * D + H));
static_assert(attention_stash_elems<long_context<4096>>() == 4 * attention_stash_elems<long_context<1024>>());
static_assert(attention_stash_elems<long_context<16384>>() == 4 * attention_stash_elems<long_context<4096>>());
static_assert(attention_stash_elems<long_context<32768>>() == 2 * attention_stash_elems<long_context<16384>>());
static_assert(long_context<4096>::peak_activation_bytes(0) == 4 * long_context<1024>::peak_activation_bytes(0));
static_assert(long_context<16384>::peak_activation_bytes(0) == 4 * long_context<4096>::peak_activation_bytes(0));
static_assert(long_context<32768>::peak_activation_bytes(0) == 2 * long_context<16384>::peak_activation_bytes(0));

// Grouped-query attention stashes k and v at KVHeads width: 4 query heads on 4 (multi-head),
// 2 and 1 (multi-query) kv heads of dh = D/H keep Seq · (3·D + 2·KVHeads·dh + H) values, and
// the plan's peak of activations shrinks with them. The biases change nothing here.
template <int Seq, int KV>
using gqa_context = Plan<Replicate<1, Embedding<V, D>, LlamaAttention<D, H, KV, Seq>, LayerNorm<D>, Linear<D, V>>,
                         Input<Seq>, Loss<SoftmaxCrossEntropy>, MicroBatch<1>>;
constexpr int dh = D / H;
static_assert(attention_stash_elems<gqa_context<1024, H>>() == 1024 * (5 * D + H));
static_assert(attention_stash_elems<gqa_context<1024, 2>>() == 1024 * (3 * D + 2 * 2 * dh + H));
static_assert(attention_stash_elems<gqa_context<1024, 1>>() == 1024 * (3 * D + 2 * 1 * dh + H));
static_assert(attention_stash_elems<gqa_context<1024, 1>>() < attention_stash_elems<gqa_context<1024, 2>>() &&
              attention_stash_elems<gqa_context<1024, 2>>() < attention_stash_elems<gqa_context<1024, H>>());
static_assert(gqa_context<1024, 1>::peak_activation_bytes(0) < gqa_context<1024, 2>::peak_activation_bytes(0) &&
              gqa_context<1024, 2>::peak_activation_bytes(0) < gqa_context<1024, H>::peak_activation_bytes(0));
static_assert(attention_stash_elems<gqa_context<4096, 2>>() == 4 * attention_stash_elems<gqa_context<1024, 2>>());
// ... and the smaller projection: w_qkv [D, (H + 2·KV)·dh], no b_qkv, fewer FLOPs
static_assert(LlamaAttention<D, H, 2, S>::params.size() == 2 &&
              LlamaAttention<D, H, 2, S>::params[0].shape == shape_v<D, (H + 2 * 2) * dh>);
static_assert(CausalSelfAttention<D, H, S>::forward_flops(shape_v<S, D>) -
                  LlamaAttention<D, H, 2, S>::forward_flops(shape_v<S, D>) ==
              2LL * S * D * (3 * D - (H + 2 * 2) * dh));
// the cost model's QKV GEMM per device under Split<2>: (H + 2·KV)·dh / 2 columns
static_assert(LlamaAttention<D, H, 2, S>::gemms({.rows = S, .n = 2, .sig = signature::head_parallel}).gemm[0].n ==
              (H + 2 * 2) * dh / 2);
// Under Split<2> each device holds one kv group: w_qkv [D, (H + 2·KV)·dh / 2], its stash half.
using gqa_tp =
    Plan<Split<2, Embedding<V, D>, Residual<RMSNorm<D>, LlamaAttention<D, H, 2, S>>, RMSNorm<D>, Linear<D, V>>,
         Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>>;
static_assert(gqa_tp::layer_plans[3].sig == signature::head_parallel);
static_assert(gqa_tp::layer_plans[3].local_params[0] == shape_v<D, (H + 2 * 2) * dh / 2>);
static_assert(gqa_tp::layer_plans[3].local_params[1] == shape_v<D / 2, D>);
static_assert(attention_stash_elems<gqa_tp>() == 4 * S * (3 * D + 2 * 2 * dh + H) / 2);

// Megatron's sequence parallelism: those regions hold 1/N of their activations.
static_assert(row_region_elems<gpt<2>>() > 0);
static_assert(row_region_elems<gpt<2, SequenceParallel>>() * 2 == row_region_elems<gpt<2>>());
static_assert(row_region_elems<gpt<4, SequenceParallel>>() * 4 == row_region_elems<gpt<4>>());
// ... and the memory analysis shows it: the whole stash and the peak are smaller
static_assert(gpt<2, SequenceParallel>::stash_bytes(0) < gpt<2>::stash_bytes(0));
static_assert(gpt<2, SequenceParallel>::peak_memory_bytes(0) < gpt<2>::peak_memory_bytes(0));
// each partial-sum all-reduce becomes a reduce-scatter, and an all-gather comes before
// each column- or head-parallel layer: per block and micro-batch, forward
template <class P>
constexpr int count(collective k, pass when) {
  int n = 0;
  for (int s = 0; s < P::stages; ++s) {
    const auto t = P::communication(s, 1);
    for (int r = 0; r < t.size; ++r)
      if (t.rows[r].kind == k && t.rows[r].when == when && t.rows[r].layer >= 0) n += t.rows[r].calls;
  }
  return n;
}
using TP = gpt<2>;
using SP = gpt<2, SequenceParallel>;
// without: the embedding's, each attention's and each MLP's partial sums all-reduced (1 + 2 x 3)
static_assert(count<TP>(collective::all_reduce, pass::forward) == 7 + 3);  // + the loss's 3 statistics
static_assert(count<SP>(collective::all_reduce, pass::forward) == 3);  // the loss's statistics only
static_assert(count<SP>(collective::reduce_scatter, pass::forward) == 7);
static_assert(count<SP>(collective::all_gather, pass::forward) == 7);  // before 3 attentions, 3 MLPs, the head
// Each of those 7 layers keeps its input for its backward: it keeps the row split it arrived
// as and gathers it again before the backward (Korthikanti et al. 2022, 4.2.2), into the
// stage's gathered buffer, so the kept copy is 1/N of the gathered input.
// (backward: 7 gradients of the reduce-scattered sums gathered, as before, and the 7 inputs)
static_assert(count<SP>(collective::all_gather, pass::backward) == 7 + 7);
static_assert(count<TP>(collective::all_gather, pass::backward) == 0);
template <class P>
constexpr bool regathers_as_split() {
  const auto& T = P::lowering::tables;
  int n = 0;
  for (int k = 0; k < T.num_convs; ++k) {
    const lower::conversion& c = T.convs[k];
    if (!c.regather) continue;
    const lower::layer_call& call = T.calls[c.layer];
    // gathered from the kept split (an activation slot of 1/2) into the work buffer the layer reads
    if (!(c.when == pass::backward && c.coll == collective::all_gather && c.src.where == lower::pool::act &&
          c.src.elems * 2 == call.dims.rows * call.dims.in_cols && c.dst == call.x && call.x.where == lower::pool::work))
      return false;
    ++n;
  }
  return n == 7;
}
static_assert(regathers_as_split<SP>());
// Under a split backward (ZB-H1) W reads the input again: the gather runs before B and before W.
template <class P>
constexpr std::array<int, 2> regather_steps() {  // in the B lists, in the W lists
  const auto& T = P::lowering::tables;
  std::array<int, 2> n{};
  auto is = [&](int k) { return T.steps[k].kind == lower::act::convert && T.convs[T.steps[k].index].regather; };
  for (int p = 0; p < P::num_parts; ++p) {
    for (int k = T.parts[p].bwd_begin; k < T.parts[p].bwd_end; ++k) n[0] += is(k);
    for (int k = T.parts[p].wgt_begin; k < T.parts[p].wgt_end; ++k) n[1] += is(k);
  }
  return n;
}
template <class Sched>
using sp_pipe = Plan<Pipeline<Split<2, Embedding<V, D>, PositionEmbedding<S, D>, Attn, MLP>,
                              Split<2, Attn, MLP, LayerNorm<D>, Linear<D, V>>>,
                     Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<2>, NumMicroBatch<4>, SequenceParallel, Schedule<Sched>>;
// 2 attentions, 2 MLPs' first Linear, the head
static_assert(regather_steps<sp_pipe<PreferBackward>>() == std::array<int, 2>{5, 0});
static_assert(regather_steps<sp_pipe<ZeroBubbleH1>>() == std::array<int, 2>{5, 5});
// Not after a view that ends a recomputed region: the view's input (the row split) lives in
// the region's recompute buffers, which later regions and micro-batches overwrite; the layer
// keeps its gathered input as before.
template <class... Mid>
using after_view = Plan<Split<2, Linear<D, 4 * D>, Linear<4 * D, D>, Mid..., Linear<D, 4 * D>, Linear<4 * D, D>>,
                        Input<S, D>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>, SequenceParallel>;
using ViewEndsRegion = after_view<Checkpoint<LayerNorm<D>, Dropout<0>>>;
using ViewKept = after_view<LayerNorm<D>, Dropout<0>>;
template <class P>
constexpr int regather_convs() {
  const auto& T = P::lowering::tables;
  int n = 0;
  for (int k = 0; k < T.num_convs; ++k) n += T.convs[k].regather;
  return n;
}
static_assert(ViewEndsRegion::recompute_region[3] >= 0 && ViewEndsRegion::recompute_region[4] < 0);
static_assert(ViewEndsRegion::lowering::tables.calls[4].regather && regather_convs<ViewEndsRegion>() == 0);
static_assert(regather_convs<ViewKept>() == 1);

// Activation recomputation: every block recomputed keeps only the blocks' inputs; the
// recompute buffers (one region's activations) are shared by every region of the stage.
using Kept = gpt<2, SequenceParallel>;
using Blocks = gpt<2, SequenceParallel, GradientCheckpoint<checkpoint_mode::automatic>>;
using Whole = gpt<2, SequenceParallel, GradientCheckpoint<checkpoint_mode::end_taskgraph>>;
static_assert(Kept::recompute_regions == 0 && Blocks::recompute_regions == 6 && Whole::recompute_regions == 1);
static_assert(Blocks::stash_bytes(0) * 3 < Kept::stash_bytes(0));
static_assert(Blocks::peak_memory_bytes(0) < Kept::peak_memory_bytes(0));
static_assert(Whole::stash_bytes(0) < Blocks::stash_bytes(0));
// a recomputed region's layers are run again in the backward, between its last layer's
// gradient arriving and its backward
template <class P>
constexpr int recompute_steps() {
  const auto& T = P::lowering::tables;
  int n = 0;
  for (int k = 0; k < T.num_steps; ++k) n += T.steps[k].kind == lower::act::recompute;
  return n;
}
static_assert(recompute_steps<Kept>() == 0);
static_assert(recompute_steps<Blocks>() == 3 * (3 + 5));  // per block: the attention half (4 layers), the MLP
// half (6), but for each ResidualBegin: a view of its input, nothing to run
// with 1F1B, the saving is per micro-batch in flight
using PP = Plan<Pipeline<Split<2, Embedding<V, D>, PositionEmbedding<S, D>, Attn, MLP>, Split<2, Attn, MLP, LayerNorm<D>, Linear<D, V>>>,
                Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<2>, NumMicroBatch<8>>;
using PP_RC = Plan<Pipeline<Split<2, Embedding<V, D>, PositionEmbedding<S, D>, Attn, MLP>, Split<2, Attn, MLP, LayerNorm<D>, Linear<D, V>>>,
                   Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<2>, NumMicroBatch<8>,
                   GradientCheckpoint<checkpoint_mode::automatic>>;
static_assert(PP_RC::peak_activation_bytes(0) * 2 < PP::peak_activation_bytes(0));

}  // namespace

int main() { return 0; }
