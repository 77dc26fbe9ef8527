// Colossal-AI's 2D (SUMMA), 2.5D and 3D tensor parallelism executed on the host: LayerNorm,
// Linear, activations and the vocabulary-parallel loss on S(0,-1) blocks (and the Llama
// blocks under 1D tensor parallelism with sequence parallelism), each plan
// trained against the same model on one device in float64 (strata::verify::
// against_one_device: losses, parameters, evaluation, identical replicas, and the bytes of
// every kind of collective equal to the planner's communication_of on every rank).
// mpi-ranks: 4 8
#include "check_one_device.hpp"

#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>

using namespace strata;

namespace {

template <class P, class T = double, class R = T>
void check(const char* name, optimizer opt, double tol, int steps = 6) {
  mpi_test::check_one_device<P, T, R>("tensor-modes", name, opt, tol, steps);
}

bool world_is(int w) { return mpi_test::world().size() == w; }

// Three Linears: under 3D the layout turns at each, so LayerNorms and the loss run with
// their features along the columns and along the depth.
template <int N>
using Net = Split<N, LayerNorm<16>, Linear<16, 32>, GeLU, LayerNorm<32>, Linear<32, 16>, ReLU, Linear<16, 8>>;
template <int N, class Mode, int MB, int M = 2>
using P = Plan<Net<N>, Loss<SoftmaxCrossEntropy>, MicroBatch<MB>, NumMicroBatch<M>, Mode>;

const Adam adam{.lr = 1e-2};
const SGD sgd{.lr = 0.1, .momentum = 0.9};

}  // namespace

TEST_CASE("2D (SUMMA), q = 2: 4 ranks, and x DP2 on 8") {
  if (world_is(4)) check<P<4, Tensor2D, 4>>("2D q=2 (Adam)", adam, 1e-10);
  if (world_is(4)) check<P<4, Tensor2D, 4, 1>>("2D q=2 (SGD momentum)", sgd, 1e-10);
  if (world_is(8)) check<P<4, Tensor2D, 4>>("2D q=2 x DP2 (Adam)", adam, 1e-10);
}

TEST_CASE("2.5D, q = 2, depth 2: 8 ranks") {
  if (world_is(8)) check<P<8, Tensor2p5D<2>, 8>>("2.5D q=2 d=2 (Adam)", adam, 1e-10);
  if (world_is(4)) check<P<4, Tensor2p5D<1>, 4>>("2.5D q=2 d=1 (Adam)", adam, 1e-10);
}

// Global-norm clipping counts every logical gradient element once, though 2.5D weights
// repeat on the depth layers and biases down the mesh columns.
TEST_CASE("clipping: 2D, 2.5D and 3D") {
  const training_options clip{.clip_norm = 0.05};
  if (world_is(4)) mpi_test::check_one_device<P<4, Tensor2D, 4>>("tensor-modes", "2D q=2, clipping", adam, 1e-10, 6, clip);
  if (world_is(8))
    mpi_test::check_one_device<P<8, Tensor2p5D<2>, 8>>("tensor-modes", "2.5D q=2 d=2, clipping", adam, 1e-10, 6, clip);
  if (world_is(8)) mpi_test::check_one_device<P<8, Tensor3D, 8>>("tensor-modes", "3D q=2, clipping", adam, 1e-10, 6, clip);
}

TEST_CASE("3D, q = 2: 8 ranks") {
  if (world_is(8)) check<P<8, Tensor3D, 8>>("3D q=2 (Adam)", adam, 1e-10);
  if (world_is(8)) check<P<8, Tensor3D, 4, 1>>("3D q=2 (SGD momentum)", sgd, 1e-10);
}

// Two pipeline stages, each a 2D mesh: activations and their gradients go between the
// stages as S(0,-1) blocks, device to device.
TEST_CASE("2D pipeline: PP2 x 2D q=2 on 8 ranks") {
  using PP = Plan<Pipeline<Split<4, LayerNorm<16>, Linear<16, 32>, GeLU>, Split<4, Linear<32, 16>, ReLU, Linear<16, 8>>>,
                  Loss<SoftmaxCrossEntropy>, MicroBatch<4>, NumMicroBatch<4>, Tensor2D>;
  if (world_is(8)) check<PP>("PP2 x 2D q=2 1F1B (Adam)", adam, 1e-10);
}

// bf16 activations and collectives, FP32 masters, against float64 on one device. The worst
// tensor is a LayerNorm's β, which starts at zero: its relative error after 6 steps is
// about 8e-2 for 1D (Megatron) on the same model too, so the bound is 0.15 for every mode;
// a wrong collective or block is off by O(1).
TEST_CASE("bf16: 1D, 2D and 3D against float64") {
  constexpr double tol = 0.15;
  if (world_is(4)) check<P<4, Tensor1D, 4>, bf16, double>("1D bf16 (SGD momentum), for reference", sgd, tol);
  if (world_is(4)) check<P<4, Tensor2D, 4>, bf16, double>("2D q=2 bf16 (SGD momentum)", sgd, tol);
  if (world_is(8)) check<P<8, Tensor3D, 8>, bf16, double>("3D q=2 bf16 (SGD momentum)", sgd, tol);
}

TEST_CASE("float32: 2D and 3D") {
  if (world_is(4)) check<P<4, Tensor2D, 4>, float>("2D q=2 float32 (Adam)", adam, 1e-5);
  if (world_is(8)) check<P<8, Tensor3D, 8>, float>("3D q=2 float32 (Adam)", adam, 1e-5);
}

// GPT blocks (pre-LN causal self-attention and GeLU MLP, two of them), a final LayerNorm
// and the vocabulary head, on float token features (the embeddings are not mode layers).
namespace {
constexpr int V = 32, S = 8, D = 16, H = 4;
using Attn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>;
using Mlp = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;
template <int N, class Mode, int MB, int Blocks = 2>
using Gpt = Plan<Split<N, Repeat<Blocks, Attn, Mlp>, LayerNorm<D>, Linear<D, V>>, Input<S, D>, Loss<SoftmaxCrossEntropy>,
                 MicroBatch<MB>, NumMicroBatch<2>, Mode>;
}  // namespace

// Dropout (layers/dropout.hpp) on S(0,-1) blocks: each device masks its block at the
// global rows (row0) and features (col0) the lowering gives it, so the masks are one device's;
// attention dropout likewise: a device's sequences from its row block, its first head from
// its feature block.
namespace {
template <int AttnDropout = 0>
using DAttn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S, 0, AttnDropout>, Dropout<10>>;
using DMlp = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Dropout<10>, Linear<4 * D, D>, Dropout<10>>;
template <int N, class Mode, int MB, int AttnDropout = 0>
using DropGpt = Plan<Split<N, Repeat<2, DAttn<AttnDropout>, DMlp>, LayerNorm<D>, Linear<D, V>>, Input<S, D>,
                     Loss<SoftmaxCrossEntropy>, MicroBatch<MB>, NumMicroBatch<2>, Mode>;
// a 3D Linear first: the attention's input arrives turned (features along the depth), so
// its core holds the other block
using TurnedDropGpt = Plan<Split<8, Linear<D, D>, DAttn<20>, DMlp, LayerNorm<D>, Linear<D, V>>, Input<S, D>,
                           Loss<SoftmaxCrossEntropy>, MicroBatch<4>, NumMicroBatch<2>, Tensor3D>;
static_assert(TurnedDropGpt::layer_plans[3].desc.name == "CausalSelfAttention" && TurnedDropGpt::layer_plans[3].turned);
}  // namespace

TEST_CASE("Dropout on 2D and 3D blocks: the masks of one device") {
  if (world_is(4)) check<DropGpt<4, Tensor2D, 2>>("GPT blocks with dropout 2D q=2 (Adam)", adam, 1e-10);
  if (world_is(8)) check<DropGpt<8, Tensor3D, 4>>("GPT blocks with dropout 3D q=2 (Adam)", adam, 1e-10);
  if (world_is(4)) check<DropGpt<4, Tensor2D, 2, 20>>("GPT blocks, attention dropout 2D q=2 (Adam)", adam, 1e-10);
  if (world_is(8)) check<DropGpt<8, Tensor3D, 4, 20>>("GPT blocks, attention dropout 3D q=2 (Adam)", adam, 1e-10);
  if (world_is(8)) check<TurnedDropGpt>("attention dropout, turned 3D input (Adam)", adam, 1e-10);
}

TEST_CASE("GPT blocks: 2D, 2.5D, 3D") {
  if (world_is(4)) check<Gpt<4, Tensor2D, 2>>("GPT blocks 2D q=2 (Adam)", adam, 1e-10);
  if (world_is(4)) check<Gpt<4, Tensor2D, 2, 1>>("GPT block 2D q=2 (Adam)", adam, 1e-10);
  if (world_is(4)) check<Gpt<4, Tensor2D, 4, 1>>("GPT block 2D q=2 mb4 (Adam)", adam, 1e-10);
  if (world_is(4)) check<Gpt<4, Tensor2D, 4, 1>>("GPT block 2D q=2 mb4 (SGD)", sgd, 1e-10);
  if (world_is(8)) check<Gpt<4, Tensor2D, 2>>("GPT blocks 2D q=2 x DP2 (Adam)", adam, 1e-10);
  if (world_is(8)) check<Gpt<8, Tensor2p5D<2>, 4>>("GPT blocks 2.5D q=2 d=2 (Adam)", adam, 1e-10);
  if (world_is(8)) check<Gpt<8, Tensor3D, 4>>("GPT blocks 3D q=2 (Adam)", adam, 1e-10);
}

// RMSNorm in place of every LayerNorm (Llama's normalisation): whole features under 1D
// with sequence parallelism, a row's features spread over a mesh row under 2D and 3D.
namespace {
using RAttn = Residual<RMSNorm<D>, CausalSelfAttention<D, H, S>>;
using RMlp = Residual<RMSNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;
template <int N, class Mode, int MB, class... Extra>
using RmsGpt = Plan<Split<N, Repeat<2, RAttn, RMlp>, RMSNorm<D>, Linear<D, V>>, Input<S, D>, Loss<SoftmaxCrossEntropy>,
                    MicroBatch<MB>, NumMicroBatch<2>, Mode, Extra...>;

// Llama's block: RMSNorm, causal attention with rotary positions, RMSNorm, SwiGLU (gate
// and up column-parallel, down row-parallel) — 1D tensor parallel with sequence parallelism.
using LlamaAttn = Residual<RMSNorm<D>, CausalSelfAttention<D, H, S, 10000>>;  // rotary positions
using LlamaMlp = Residual<RMSNorm<D>, SwiGLU<D, 48>>;
// (token ids through a vocabulary-parallel embedding; the positions are the attention's)
template <int N, int MB, class... Extra>
using Llama = Plan<Split<N, Embedding<V, D>, Repeat<2, LlamaAttn, LlamaMlp>, RMSNorm<D>, Linear<D, V>>, Input<S>,
                   Loss<SoftmaxCrossEntropy>, MicroBatch<MB>, NumMicroBatch<2>, Extra...>;
// Llama 3's attention: grouped-query (H = 4 query heads on 2 key/value heads, so each device
// of a Split<2> holds one kv group), causal, rotary, no biases.
using GqaAttn = Residual<RMSNorm<D>, LlamaAttention<D, H, 2, S>>;
template <int N, int MB, class... Extra>
using LlamaGqa = Plan<Split<N, Embedding<V, D>, Repeat<2, GqaAttn, LlamaMlp>, RMSNorm<D>, Linear<D, V>>, Input<S>,
                      Loss<SoftmaxCrossEntropy>, MicroBatch<MB>, NumMicroBatch<2>, Extra...>;
// ... and on a 2D or 3D mesh (q = 2: a kv group per feature block), on float token features
template <int N, class Mode, int MB>
using GqaMesh = Plan<Split<N, Repeat<2, GqaAttn, RMlp>, RMSNorm<D>, Linear<D, V>>, Input<S, D>,
                     Loss<SoftmaxCrossEntropy>, MicroBatch<MB>, NumMicroBatch<2>, Mode>;
// RMSNorm blocks with sequence parallelism: the rows after the embedding's partial sum split
using RmsSP = Plan<Split<4, Embedding<V, D>, PositionEmbedding<S, D>, Repeat<2, RAttn, RMlp>, RMSNorm<D>, Linear<D, V>>,
                   Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>, NumMicroBatch<2>, SequenceParallel>;
}  // namespace

TEST_CASE("Llama blocks (RMSNorm, rotary attention, SwiGLU): TP4 + SP, and x DP2") {
  if (world_is(4) || world_is(8)) check<Llama<4, 4, SequenceParallel>>("Llama blocks TP4 + SP (Adam)", adam, 1e-10);
  if (world_is(4)) check<Llama<4, 4, SequenceParallel>, bf16, double>("Llama blocks TP4 + SP, bf16 (SGD)", sgd, 3e-2);
}

TEST_CASE("Llama 3 blocks (grouped-query attention, no biases): TP2 + SP x DP2, 2D and 3D q=2") {
  if (world_is(4)) check<LlamaGqa<2, 4, SequenceParallel>>("Llama GQA blocks TP2 + SP x DP2 (Adam)", adam, 1e-10);
  if (world_is(4)) check<GqaMesh<4, Tensor2D, 2>>("Llama GQA blocks 2D q=2 (Adam)", adam, 1e-10);
  if (world_is(8)) check<GqaMesh<8, Tensor3D, 4>>("Llama GQA blocks 3D q=2 (Adam)", adam, 1e-10);
}

TEST_CASE("RMSNorm blocks: 1D + SP, 2D, 3D") {
  if (world_is(4)) check<RmsSP>("RMSNorm blocks 1D + SP (Adam)", adam, 1e-10);
  if (world_is(4)) check<RmsGpt<4, Tensor2D, 2>>("RMSNorm blocks 2D q=2 (Adam)", adam, 1e-10);
  if (world_is(8)) check<RmsGpt<8, Tensor3D, 4>>("RMSNorm blocks 3D q=2 (Adam)", adam, 1e-10);
}
