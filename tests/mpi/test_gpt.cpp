// GPT plans under every strategy train to the same losses and parameters as the same
// model on one device (strata::verify::against_one_device: losses and every parameter
// each step, evaluation, bytes per collective against the cost model, buffers against
// the lowered plan, replicas bit for bit): float64 within 1e-9, bf16 against float64.
// A GPT here: token + position embedding, pre-LN blocks (causal self-attention, GeLU
// MLP), final LayerNorm, per-token loss over the vocabulary.
// mpi-ranks: 2 4 8
#include "check_one_device.hpp"

#include <cstdio>
#include <type_traits>

#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>

using namespace strata;

namespace {

constexpr int V = 32, S = 8, D = 16, H = 4;
using Attn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>;
using MLP = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;
using Block = Repeat<1, Attn, MLP>;
using Head = type_list<LayerNorm<D>, Linear<D, V>>;
using CE = Loss<SoftmaxCrossEntropy>;

template <template <int, class...> class Strategy, int N, class... Extra>
using whole = Plan<Strategy<N, Embedding<V, D>, PositionEmbedding<S, D>, Repeat<2, Attn, MLP>, LayerNorm<D>, Linear<D, V>>,
                   Input<S>, CE, Extra...>;

template <class P, class T = double, class R = T>
void check(const char* name, optimizer opt, double tol, int steps = 6) {
  mpi_test::check_one_device<P, T, R>("gpt", name, opt, tol, steps);
}

bool world_is(int n) { return mpi_test::world().size() == n; }

const Adam adam{.lr = 1e-2};
const SGD sgd{.lr = 0.1, .momentum = 0.9};

using DP = whole<Replicate, 1, MicroBatch<2>, NumMicroBatch<2>>;
using TP2 = whole<Split, 2, MicroBatch<4>>;
using TP2_SP = whole<Split, 2, MicroBatch<4>, SequenceParallel>;
using PP2 = Plan<Pipeline<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, Attn, MLP>, Replicate<1, Attn, MLP, LayerNorm<D>, Linear<D, V>>>,
                 Input<S>, CE, MicroBatch<2>, NumMicroBatch<4>>;
using INTERLEAVED = Plan<Pipeline<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, Attn>, Replicate<1, MLP>,
                                  Replicate<1, Attn>, Replicate<1, MLP, LayerNorm<D>, Linear<D, V>>>,
                         Input<S>, CE, MicroBatch<2>, NumMicroBatch<4>, Schedule<Interleaved<2>>>;
using HYBRID = Plan<Pipeline<Split<2, Embedding<V, D>, PositionEmbedding<S, D>, Attn, MLP>, Split<2, Attn, MLP, LayerNorm<D>, Linear<D, V>>>,
                    Input<S>, CE, MicroBatch<2>, NumMicroBatch<4>>;
using HYBRID_SP = Plan<Pipeline<Split<2, Embedding<V, D>, PositionEmbedding<S, D>, Attn, MLP>, Split<2, Attn, MLP, LayerNorm<D>, Linear<D, V>>>,
                       Input<S>, CE, MicroBatch<2>, NumMicroBatch<4>, SequenceParallel>;

// with activation recomputation: the recompute repeats the regions' collectives too
using TP2_SP_RC = whole<Split, 2, MicroBatch<4>, SequenceParallel, GradientCheckpoint<checkpoint_mode::automatic>>;
using PP2_RC = Plan<Pipeline<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, Attn, MLP>, Replicate<1, Attn, MLP, LayerNorm<D>, Linear<D, V>>>,
                    Input<S>, CE, MicroBatch<2>, NumMicroBatch<4>, GradientCheckpoint<checkpoint_mode::end_taskgraph>>;
using HYBRID_RC = Plan<Pipeline<Split<2, Embedding<V, D>, PositionEmbedding<S, D>, Attn, MLP>, Split<2, Attn, MLP, LayerNorm<D>, Linear<D, V>>>,
                       Input<S>, CE, MicroBatch<2>, NumMicroBatch<4>, SequenceParallel,
                       GradientCheckpoint<checkpoint_mode::automatic>>;
static_assert(TP2_SP_RC::recompute_regions == 4 && PP2_RC::recompute_regions == 2 && HYBRID_RC::recompute_regions == 4);

// Tied embeddings: the head reads the Embedding's table (TiedHead). On one stage both uses
// hold a copy summed locally; across stages the first and last stage each hold one and
// sum their gradients after the reduction.
template <class Head0, class Head1, class... Extra>
using tied_pipe = Plan<Pipeline<Head0, Head1>, Input<S>, CE, MicroBatch<2>, NumMicroBatch<4>, Extra...>;
template <template <int, class...> class Strategy, int N, class... Extra>
using tied_pp2 = tied_pipe<Strategy<N, Embedding<V, D>, PositionEmbedding<S, D>, Attn, MLP>,
                           Strategy<N, Attn, MLP, LayerNorm<D>, TiedHead<V, D>>, Extra...>;
using T_DP = Plan<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, Repeat<2, Attn, MLP>, LayerNorm<D>, TiedHead<V, D>>,
                  Input<S>, CE, MicroBatch<2>, NumMicroBatch<2>>;
using T_TP2_SP = Plan<Split<2, Embedding<V, D>, PositionEmbedding<S, D>, Repeat<2, Attn, MLP>, LayerNorm<D>, TiedHead<V, D>>,
                      Input<S>, CE, MicroBatch<4>, SequenceParallel>;
using T_PP2 = tied_pp2<Replicate, 1>;
using T_PP2_SP = tied_pp2<Split, 2, SequenceParallel>;
using T_PP2_RC = tied_pp2<Split, 2, SequenceParallel, GradientCheckpoint<checkpoint_mode::automatic>>;
template <int Z>
using T_PP2_Z = tied_pp2<Replicate, 1, Zero<Z>>;
// four parts: interleaved puts the head on the last stage, ZB-V back on the first
template <class Sched>
using T_4 = Plan<Pipeline<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, Attn>, Replicate<1, MLP>, Replicate<1, Attn>,
                          Replicate<1, MLP, LayerNorm<D>, TiedHead<V, D>>>,
                 Input<S>, CE, MicroBatch<2>, NumMicroBatch<4>, Schedule<Sched>>;
static_assert(T_PP2::tie.owner == 0 && T_PP2::tie.user == T_PP2::num_layers - 2);  // the loss is last
static_assert(T_4<ZeroBubbleV>::stage_of_part(3) == 0 && T_4<Interleaved<2>>::stage_of_part(3) == 1);

// Dropout<10> at the end of every residual branch and on the MLP's hidden activations: the
// masks are functions of global coordinates (layers/dropout.hpp), so every plan still equals
// one device
using DropAttn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>, Dropout<10>>;
using DropMLP = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Dropout<10>, Linear<4 * D, D>, Dropout<10>>;
template <template <int, class...> class Strategy, int N, class... Extra>
using dropped = Plan<Strategy<N, Embedding<V, D>, PositionEmbedding<S, D>, Repeat<2, DropAttn, DropMLP>, LayerNorm<D>,
                              Linear<D, V>>,
                     Input<S>, CE, Extra...>;
using DROP_DP = dropped<Replicate, 1, MicroBatch<2>, NumMicroBatch<2>>;
using DROP_TP2_SP = dropped<Split, 2, MicroBatch<4>, SequenceParallel>;
using DROP_TP2_SP_RC = dropped<Split, 2, MicroBatch<4>, SequenceParallel, GradientCheckpoint<checkpoint_mode::automatic>>;
using DROP_PP2 = Plan<Pipeline<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, DropAttn, DropMLP>,
                               Replicate<1, DropAttn, DropMLP, LayerNorm<D>, Linear<D, V>>>,
                      Input<S>, CE, MicroBatch<2>, NumMicroBatch<4>>;
// the same flat layers (so the same sites) in every plan; under TP the hidden Dropout masks
// its device's features (global indices from col0), and after the row-parallel Linear the
// partial sum is reduce-scattered before the Dropout, never masked as a partial sum
static_assert(std::is_same_v<DROP_DP::layers, DROP_PP2::layers> && std::is_same_v<DROP_DP::layers, DROP_TP2_SP::layers>);
constexpr auto& hidden_drop = DROP_TP2_SP::layer_plans[11];
constexpr auto& branch_drop = DROP_TP2_SP::layer_plans[13];
static_assert(hidden_drop.desc.name == "Dropout" && hidden_drop.in_layout == sbp::split_feature);
static_assert(branch_drop.desc.name == "Dropout" && branch_drop.arrives == sbp::partial &&
              branch_drop.in_layout == sbp::split_batch);
static_assert(DROP_TP2_SP_RC::recompute_regions == 4);

// A Llama-style model with everything on: tied embeddings, RMSNorm, rotary grouped-query
// attention without biases (4 query heads over 2 key/value heads) with 10% attention dropout,
// SwiGLU, dropout on both residual branches.
using LlamaAttn = Residual<RMSNorm<D>, LlamaAttention<D, H, 2, S, 10000, 10>, Dropout<10>>;
using LlamaMlp = Residual<RMSNorm<D>, SwiGLU<D, 24>, Dropout<10>>;
template <template <int, class...> class Strategy, int N, class... Extra>
using llama = Plan<Strategy<N, Embedding<V, D>, Repeat<2, LlamaAttn, LlamaMlp>, RMSNorm<D>, TiedHead<V, D>>, Input<S>, CE,
                   Extra...>;
template <template <int, class...> class Strategy, int N, class... Extra>
using llama_pp2 = Plan<Pipeline<Strategy<N, Embedding<V, D>, LlamaAttn, LlamaMlp>,
                                Strategy<N, LlamaAttn, LlamaMlp, RMSNorm<D>, TiedHead<V, D>>>,
                       Input<S>, CE, MicroBatch<2>, NumMicroBatch<4>, Extra...>;
using L_DP = llama<Replicate, 1, MicroBatch<2>, NumMicroBatch<2>>;
using L_TP2_SP = llama<Split, 2, MicroBatch<4>, SequenceParallel>;
using L_TP2_SP_RC = llama<Split, 2, MicroBatch<4>, SequenceParallel, GradientCheckpoint<checkpoint_mode::automatic>>;
using L_PP2 = llama_pp2<Replicate, 1>;
using L_PP2_Z3 = llama_pp2<Replicate, 1, Zero<3>>;
using L_HYBRID = llama_pp2<Split, 2, SequenceParallel>;
static_assert(L_PP2::tie.any() && L_PP2::stage_of_part(L_PP2::layer_plans[L_PP2::tie.user].part) == 1);
// Attention dropout on the probabilities of a GPT block and of a Llama block (grouped-query:
// 4 query heads on 2 kv heads): the masks at (sample, query position, global query head · S
// + key position), so under a head split each device's heads draw one device's masks
using ADropGpt = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S, 0, 20>, Dropout<10>>;
using ADropLlama = Residual<RMSNorm<D>, LlamaAttention<D, H, 2, S, 10000, 20>>;
template <template <int, class...> class Strategy, int N, class... Extra>
using attn_dropped = Plan<Strategy<N, Embedding<V, D>, PositionEmbedding<S, D>, ADropGpt, MLP, ADropLlama, MLP,
                                   LayerNorm<D>, Linear<D, V>>,
                          Input<S>, CE, Extra...>;
using ADROP_DP = attn_dropped<Replicate, 1, MicroBatch<2>, NumMicroBatch<2>>;
using ADROP_TP2_SP = attn_dropped<Split, 2, MicroBatch<4>, SequenceParallel>;
using ADROP_TP2_SP_RC =
    attn_dropped<Split, 2, MicroBatch<4>, SequenceParallel, GradientCheckpoint<checkpoint_mode::automatic>>;
using ADROP_PP2 = Plan<Pipeline<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, ADropGpt, MLP>,
                                Replicate<1, ADropLlama, MLP, LayerNorm<D>, Linear<D, V>>>,
                       Input<S>, CE, MicroBatch<2>, NumMicroBatch<4>>;
static_assert(std::is_same_v<ADROP_DP::layers, ADROP_PP2::layers> && ADROP_TP2_SP::layer_plans[4].desc.name ==
              "CausalSelfAttention" && ADROP_TP2_SP::layer_plans[4].sig == signature::head_parallel);
static_assert(ADROP_TP2_SP_RC::recompute_regions == 4);

}  // namespace

TEST_CASE("Llama: tied, grouped-query, rotary, SwiGLU, dropout on, under every plan") {
  if (world_is(2)) {
    check<L_DP>("llama: DP2", adam, 1e-9);
    check<L_TP2_SP>("llama: TP2 + sequence parallel", adam, 1e-9);
    check<L_TP2_SP_RC>("llama: TP2 + SP, recompute blocks", adam, 1e-9);
    check<L_PP2>("llama: PP2 1F1B (tied across the stages)", adam, 1e-9);
    // SGD: bf16's rounding noise in zero gradients would be scaled to lr-sized steps by Adam
    check<L_TP2_SP, bf16, double>("llama: bf16 TP2 + SP against float64", sgd, 3e-2);
  }
  if (world_is(4)) check<L_PP2_Z3>("llama: PP2 x DP2 ZeRO-3", adam, 1e-9);
  if (world_is(8)) check<L_HYBRID>("llama: DP2 x PP2 x TP2 + sequence parallel", adam, 1e-9);
}

TEST_CASE("GPT: tied input embedding and output head") {
  const training_options clip{.clip_norm = 0.05};
  if (world_is(2)) {
    check<T_DP>("tied, DP2", adam, 1e-9);
    check<T_TP2_SP>("tied, TP2 + sequence parallel", adam, 1e-9);
    check<T_PP2>("tied, PP2 1F1B (a copy per stage)", adam, 1e-9);
    mpi_test::check_one_device<T_PP2>("gpt", "tied, PP2 1F1B, clipped", adam, 1e-9, 6, clip);
    check<T_4<Interleaved<2>>>("tied, interleaved 2 x 2 (copies on two stages)", adam, 1e-9);
    check<T_4<ZeroBubbleV>>("tied, ZB-V (both copies on stage 0)", adam, 1e-9);
  }
  if (world_is(4)) {
    check<T_PP2_SP>("tied, PP2 x TP2 + sequence parallel", adam, 1e-9);
    check<T_PP2_Z<1>>("tied, PP2 x DP2 ZeRO-1", adam, 1e-9);
    check<T_PP2_Z<2>>("tied, PP2 x DP2 ZeRO-2", adam, 1e-9);
    mpi_test::check_one_device<T_PP2_Z<3>>("gpt", "tied, PP2 x DP2 ZeRO-3, clipped", adam, 1e-9, 6, clip);
  }
  if (world_is(8)) {
    check<T_PP2_SP>("tied, DP2 x PP2 x TP2 + sequence parallel", adam, 1e-9);
    check<T_PP2_RC>("tied, DP2 x PP2 x TP2 + SP, recompute blocks", adam, 1e-9);
  }
}

TEST_CASE("GPT: dropout on the residual branches, the same masks under every plan") {
  if (world_is(2)) check<DROP_DP>("dropout: DP2", adam, 1e-9);
  if (world_is(2)) check<DROP_TP2_SP>("dropout: TP2 + sequence parallel", adam, 1e-9);
  if (world_is(2)) check<DROP_PP2>("dropout: PP2 1F1B", adam, 1e-9);
  if (world_is(2)) check<DROP_TP2_SP_RC>("dropout: TP2 + SP, recompute blocks", adam, 1e-9);
  if (world_is(4)) check<DROP_TP2_SP>("dropout: DP2 x TP2 + sequence parallel", adam, 1e-9);
}

TEST_CASE("GPT and Llama blocks: attention dropout, the same masks under every plan") {
  if (world_is(2)) check<ADROP_DP>("attention dropout: DP2", adam, 1e-9);
  if (world_is(2)) check<ADROP_TP2_SP>("attention dropout: TP2 + sequence parallel", adam, 1e-9);
  if (world_is(2)) check<ADROP_PP2>("attention dropout: PP2 1F1B", adam, 1e-9);
  if (world_is(2)) check<ADROP_TP2_SP_RC>("attention dropout: TP2 + SP, recompute blocks", adam, 1e-9);
  if (world_is(4)) check<ADROP_TP2_SP>("attention dropout: DP2 x TP2 + sequence parallel", adam, 1e-9);
}

TEST_CASE("GPT: activation recomputation") {
  if (world_is(2)) check<TP2_SP_RC>("TP2 + sequence parallel, recompute blocks", adam, 1e-9);
  if (world_is(2)) check<PP2_RC>("PP2 1F1B, recompute TaskGraphs", adam, 1e-9);
  if (world_is(8)) check<HYBRID_RC>("DP2 x PP2 x TP2 + SP, recompute blocks", adam, 1e-9);
}

TEST_CASE("GPT: data parallel") {
  if (world_is(2)) check<DP>("DP2 (Adam)", adam, 1e-9);
  if (world_is(4)) check<DP>("DP4 (SGD momentum)", sgd, 1e-9);
}

TEST_CASE("GPT: tensor parallel (head-parallel attention, Megatron MLP, vocabulary-parallel loss)") {
  if (world_is(2)) check<TP2>("TP2", adam, 1e-9);
  if (world_is(2)) check<TP2_SP>("TP2 + sequence parallel", adam, 1e-9);
  if (world_is(4)) check<TP2_SP>("TP2 + sequence parallel x DP2", sgd, 1e-9);
}

TEST_CASE("GPT: pipeline") {
  if (world_is(2)) check<PP2>("PP2 1F1B (blocks over two stages)", adam, 1e-9);
  if (world_is(2)) check<INTERLEAVED>("interleaved 2 stages x 2 chunks", adam, 1e-9);
  if (world_is(4)) check<HYBRID_SP>("PP2 x TP2 + sequence parallel", adam, 1e-9);
  if (world_is(8)) check<HYBRID>("DP2 x PP2 x TP2", adam, 1e-9);
  if (world_is(8)) check<HYBRID_SP>("DP2 x PP2 x TP2 + sequence parallel", adam, 1e-9);
}

// SGD, not Adam: the key bias's gradient is exactly zero (a constant added to every score
// of a row), so in bf16 it is rounding noise, which Adam scales up to lr-sized steps.
TEST_CASE("GPT: bf16 against float64") {
  if (world_is(2)) check<TP2_SP, bf16, double>("bf16 TP2 + sequence parallel", sgd, 3e-2);
  if (world_is(4)) check<HYBRID, bf16, double>("bf16 PP2 x TP2", sgd, 3e-2);
}
