// Every multi-rank plan trains to the same losses and parameters as the same model on
// one device, from the same seed and data: float64 within 1e-9, float32 SGD within 1e-5,
// and bf16 mixed precision (bf16 activations and collectives, FP32 master weights and
// gradient all-reduce) against the float64 one-device run within bf16 accuracy. Through
// the public verifier (strata::verify::against_one_device), which also requires, on every
// rank, the bytes each kind of collective moved in a step to equal the plan's cost model
// (Plan::communication_of) exactly, the activation buffers to equal the lowered plan, the
// evaluation to agree, and the replicas to hold identical bits.
// mpi-ranks: 2 4 8
#include "check_one_device.hpp"

#include <cstdio>

#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>

using namespace strata;

namespace {

template <class P, class T = double, class R = T>
void check(const char* name, optimizer opt, double tol, int steps = 10) {
  mpi_test::check_one_device<P, T, R>("equivalence", name, opt, tol, steps);
}

template <int W>
bool world_is() {
  return mpi_test::world().size() == W;
}

using L16 = Linear<16, 32>;
using MLP = Replicate<1, Linear<16, 32>, ReLU, Linear<32, 32>, GeLU, Linear<32, 4>>;
using CE = Loss<SoftmaxCrossEntropy>;
const SGD sgd{.lr = 0.1, .momentum = 0.9};
const Adam adam{.lr = 1e-2};

}  // namespace

TEST_CASE("DP2 and DP4: data parallel") {
  if (world_is<2>()) check<Plan<MLP, CE, MicroBatch<4>, NumMicroBatch<2>>>("DP2 (SGD momentum)", sgd, 1e-9);
  if (world_is<4>()) check<Plan<MLP, CE, MicroBatch<4>, NumMicroBatch<1>>>("DP4 (SGD momentum)", sgd, 1e-9);
  if (world_is<4>()) check<Plan<MLP, CE, MicroBatch<4>, NumMicroBatch<1>>>("DP4 (Adam)", adam, 1e-9);
  if (world_is<2>()) check<Plan<MLP, CE, MicroBatch<4>, NumMicroBatch<2>>, float>("DP2 float32 (SGD)", sgd, 1e-5);
}

TEST_CASE("PP2 GPipe, PP4 1F1B, interleaved") {
  using S = Replicate<1, Linear<16, 16>, ReLU>;
  if (world_is<2>())
    check<Plan<Pipeline<Replicate<1, Linear<16, 32>, ReLU>, Replicate<1, Linear<32, 4>>>, CE, MicroBatch<4>,
               NumMicroBatch<4>, Schedule<PreferForward>>>("PP2 GPipe", sgd, 1e-9);
  if (world_is<4>())
    check<Plan<Pipeline<S, S, S, Replicate<1, Linear<16, 4>>>, CE, MicroBatch<2>, NumMicroBatch<8>,
               Schedule<PreferBackward>>>("PP4 1F1B", sgd, 1e-9);
  if (world_is<2>())
    check<Plan<Pipeline<S, S, S, Replicate<1, Linear<16, 4>>>, CE, MicroBatch<2>, NumMicroBatch<8>,
               Schedule<Interleaved<2>>>>("interleaved 2 stages x 2 chunks", sgd, 1e-9);
  if (world_is<4>())
    check<Plan<Pipeline<Replicate<1, Linear<16, 32>, ReLU>, Replicate<1, Linear<32, 4>>>, CE, MicroBatch<4>,
               NumMicroBatch<4>>>("PP2 x DP2 1F1B (Adam)", adam, 1e-9);
}

TEST_CASE("AutoStages: stages the planner cut, against one device") {
  // five units; the planner puts the two wide Linears on different stages
  using Net = Model<Linear<16, 64>, ReLU, Linear<64, 64>, GeLU, Linear<64, 4>>;
  using A2 = Plan<Net, AutoStages<2>, CE, MicroBatch<4>, NumMicroBatch<4>>;
  static_assert(A2::stages == 2 && A2::deadlock_free);
  static_assert(detail::auto_stages<Net, AutoStages<2>, CE, MicroBatch<4>, NumMicroBatch<4>>::cuts[1] == 2);
  if (world_is<2>()) check<A2>("AutoStages<2> (1F1B)", sgd, 1e-9);
  if (world_is<4>()) check<A2>("AutoStages<2> x DP2 (Adam)", adam, 1e-9);
  using A4 = Plan<Net, AutoStages<4>, CE, MicroBatch<2>, NumMicroBatch<8>, Schedule<PreferForward>, Default<Split<2>>>;
  static_assert(A4::devices_per_replica == 8);
  if (world_is<8>()) check<A4>("AutoStages<4> of Split<2> (GPipe)", sgd, 1e-9);
}

TEST_CASE("Megatron tensor parallel") {
  using TP2 = Plan<Split<2, Linear<16, 32>, GeLU, Linear<32, 16>, ReLU, Linear<16, 4>>, CE, MicroBatch<8>>;
  using TP4 = Plan<Split<4, Linear<16, 32>, GeLU, Linear<32, 16>, ReLU, Linear<16, 4>>, CE, MicroBatch<8>>;
  using VOCAB = Plan<Split<4, Linear<16, 32>, ReLU, Linear<32, 16>, LayerNorm<16>, Linear<16, 64>>, CE, MicroBatch<8>>;
  static_assert(VOCAB::layer_plans[5].sig == signature::vocab_loss);
  if (world_is<2>()) check<TP2>("TP2 Megatron MLP", sgd, 1e-9);
  if (world_is<4>()) check<TP4>("TP4 Megatron MLP", sgd, 1e-9);
  if (world_is<4>()) check<VOCAB>("TP4 vocabulary-parallel classifier", sgd, 1e-9);
  if (world_is<4>()) check<TP2, float>("TP2 x DP2 float32 (SGD)", sgd, 1e-5);
}

TEST_CASE("DP2 x PP2 x TP2 on 8 ranks") {
  using H = Plan<Pipeline<Split<2, Linear<16, 32>, ReLU, Linear<32, 16>>, Split<2, Linear<16, 32>, ReLU, Linear<32, 4>>>,
                 CE, MicroBatch<4>, NumMicroBatch<4>>;
  if (world_is<8>()) check<H>("DP2 x PP2 x TP2", sgd, 1e-9);
  if (world_is<8>()) check<H>("DP2 x PP2 x TP2 (AdamW)", AdamW{.lr = 1e-2}, 1e-9);
}

TEST_CASE("colocated Replicate + Split, default strategy, Replicate<N> batch split") {
  using CO = Plan<Colocate<Replicate<2, Linear<16, 32>, ReLU>, Split<2, Linear<32, 16>>>, CE, MicroBatch<8>>;
  static_assert(CO::layer_plans[2].sig == signature::column_parallel && CO::layer_plans[3].sig == signature::vocab_loss);
  using DEF = Plan<Colocate<Linear<16, 32>, ReLU, Split<2, Linear<32, 32>, GeLU, Linear<32, 16>>, Linear<16, 4>>,
                   Default<Replicate<2>>, CE, MicroBatch<8>>;
  using R2 = Plan<Replicate<2, Linear<16, 32>, ReLU, Linear<32, 4>>, CE, MicroBatch<8>, NumMicroBatch<2>>;
  if (world_is<2>()) check<CO>("colocated Replicate<2> + Split<2>", sgd, 1e-9);
  if (world_is<4>()) check<CO>("colocated x DP2", sgd, 1e-9);
  if (world_is<2>()) check<DEF>("default strategy Replicate<2>", sgd, 1e-9);
  if (world_is<4>()) check<R2>("Replicate<2> x DP2", sgd, 1e-9);
}

// GradientReduce<ReduceSum>: the gradient is dp x the mean gradient over the global batch;
// its one-device equivalent multiplies the mean gradient by dp (the verifier does).
TEST_CASE("GradientReduce<ReduceSum>") {
  using SUM = Plan<Replicate<1, Linear<16, 32>, ReLU, Linear<32, 4>>, CE, MicroBatch<4>, NumMicroBatch<2>,
                   GradientReduce<ReduceSum>>;
  using SUM_TP = Plan<Pipeline<Split<2, Linear<16, 32>, ReLU, Linear<32, 16>>, Split<2, Linear<16, 32>, GeLU, Linear<32, 4>>>,
                      CE, MicroBatch<4>, NumMicroBatch<2>, GradientReduce<ReduceSum>>;
  check<SUM>("ReduceSum DP (SGD momentum, weight decay)", SGD{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01}, 1e-9);
  check<SUM>("ReduceSum DP (Adam)", adam, 1e-9);
  if (world_is<8>()) check<SUM_TP>("ReduceSum DP2 x PP2 x TP2", sgd, 1e-9);
}

TEST_CASE("vocabulary-parallel embedding") {
  using EMB = Plan<Split<2, Embedding<64, 16>, LayerNorm<16>, Linear<16, 32>, ReLU, Linear<32, 8>>, Input<3>, CE,
                   MicroBatch<4>>;
  static_assert(EMB::layer_plans[0].sig == signature::vocab_embedding);
  if (world_is<2>()) check<EMB>("TP2 vocab embedding (3 tokens/sample)", sgd, 1e-9);
}

// bf16 against exact arithmetic: every rounding of an activation or a partial sum is
// 2^-8 relative, so losses agree to about 1e-3 and parameters (after 10 steps of SGD
// with momentum) to about 1e-2; a wrong collective or shard is off by O(1).
TEST_CASE("bf16 mixed precision across ranks, against float64 on one device") {
  using TP2 = Plan<Split<2, Linear<16, 32>, GeLU, Linear<32, 16>, GeLU, Linear<16, 4>>, CE, MicroBatch<8>>;
  using PP = Plan<Pipeline<Replicate<1, Linear<16, 32>, GeLU>, Replicate<1, Linear<32, 4>>>, CE, MicroBatch<4>,
                  NumMicroBatch<4>>;
  using VOCAB = Plan<Split<2, Linear<16, 32>, GeLU, Linear<32, 16>, LayerNorm<16>, Linear<16, 64>>, CE, MicroBatch<8>>;
  using EMB = Plan<Split<2, Embedding<512, 16>, LayerNorm<16>, Linear<16, 32>, GeLU, Linear<32, 8>>, Input<3>, CE,
                   MicroBatch<4>>;
  using H = Plan<Pipeline<Split<2, Linear<16, 32>, GeLU, Linear<32, 16>>, Split<2, Linear<16, 32>, GeLU, Linear<32, 4>>>,
                 CE, MicroBatch<4>, NumMicroBatch<4>>;
  using DP = Plan<Replicate<1, Linear<16, 32>, GeLU, Linear<32, 32>, GeLU, Linear<32, 4>>, CE, MicroBatch<4>,
                  NumMicroBatch<2>>;
  constexpr double tol = 2e-2;
  if (world_is<2>()) check<DP, bf16, double>("bf16 DP2 (SGD momentum)", sgd, tol);
  if (world_is<2>()) check<TP2, bf16, double>("bf16 TP2 Megatron MLP", sgd, tol);
  if (world_is<2>()) check<PP, bf16, double>("bf16 PP2 1F1B", sgd, tol);
  if (world_is<2>()) check<VOCAB, bf16, double>("bf16 TP2 vocabulary-parallel classifier", sgd, tol);
  if (world_is<2>()) check<EMB, bf16, double>("bf16 TP2 vocab embedding, ids to 511", sgd, tol);
  if (world_is<4>()) check<TP2, bf16, double>("bf16 TP2 x DP2 (Adam)", adam, 5e-2);
  if (world_is<8>()) check<H, bf16, double>("bf16 DP2 x PP2 x TP2", sgd, tol);
}
