// The planner searches for the plan: GPT-2 small (12 blocks, D 768, context 1024) on 16
// A100s with 20 GiB per device and a global batch of 256 sequences. It tries tensor
// degrees 1, 2, 4 (with and without sequence parallelism), recomputation on and off,
// every power-of-two pipeline depth with AutoStages' balanced cut, micro-batch sizes 1–8
// and ZeRO 0–3, ranks them by the cost model's step time (plan/cost.hpp) and returns the
// fastest that fits as an ordinary Plan type.
#include <cstdio>

#include <strata/plan/search.hpp>
#include <strata/strata.hpp>

using namespace strata;

constexpr int Vocab = 50304, Seq = 1024, D = 768, Heads = 12;
using Attention = Residual<LayerNorm<D>, CausalSelfAttention<D, Heads, Seq>>;
using MLP = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;
using GPT2 = Model<Embedding<Vocab, D>, PositionEmbedding<Seq, D>, Repeat<12, Attention, MLP>, LayerNorm<D>,
                   Linear<D, Vocab>>;

using Found = Search<GPT2, /*devices*/ 16, /*MiB per device*/ 20 * 1024, /*global batch*/ 256, hw::A100_80GB,
                     TensorDegrees<1, 2, 4>, Input<Seq>, Loss<SoftmaxCrossEntropy>, Element<bf16>>;
using P = Found::plan;  // Plan<Pipeline<...>, MicroBatch<b>, NumMicroBatch<M>, Zero<z>, World<16>, ...>

// What a user can hold the choice to: its predicted MFU and memory, and the plan's own analyses.
static_assert(Found::best.estimate.mfu > 0.20);  // D 768: the materialized attention scores are costly
static_assert(Found::best.estimate.memory_bytes < 20LL << 30);
static_assert(P::valid && P::deadlock_free && P::global_batch(16) == 256);
static_assert(P::peak_memory_bytes(0, P::data_parallel()) <= Found::best.estimate.memory_bytes);

int main() {
  Found::print_ranked();  // the eight fastest that fit, with where their time goes
  std::printf("chosen: %d-way tensor x %d stages x %d replicas, micro-batch %d x %d, ZeRO %d\n", P::part_devices,
              P::stages, P::data_parallel(), P::micro_batch, P::num_micro_batch, P::zero);
  return 0;
}
