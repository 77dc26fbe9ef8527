// AutoStages<K> (EPL's auto.auto_parallel with pipeline.num_stages): the planner cuts an
// unannotated GPT into pipeline stages itself, balancing each stage's forward + backward
// FLOPs under a per-device memory budget. The result is an ordinary plan.
#include <cstdio>
#include <type_traits>

#include <strata/strata.hpp>

using namespace strata;

constexpr int Vocab = 64, Seq = 16, D = 32, Heads = 4;
using Attention = Residual<LayerNorm<D>, CausalSelfAttention<D, Heads, Seq>>;
using MLP = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;
// No Pipeline written: 12 units (2 embeddings, 4 × 2 blocks, LayerNorm, head) to cut between.
using GPT = Model<Embedding<Vocab, D>, PositionEmbedding<Seq, D>, Repeat<4, Attention, MLP>, LayerNorm<D>,
                  Linear<D, Vocab>>;
using P = Plan<GPT, AutoStages<3>, Input<Seq>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>, NumMicroBatch<6>>;

static_assert(P::stages == 3 && P::deadlock_free);
// The cut it chose, as a Pipeline you could have written: {embeddings, block, attention}
// {MLP, block} {block, LayerNorm, head}.
static_assert(std::is_same_v<P::net, Pipeline<Colocate<Embedding<Vocab, D>, PositionEmbedding<Seq, D>, Attention, MLP, Attention>,
                                              Colocate<MLP, Attention, MLP>,
                                              Colocate<Attention, MLP, LayerNorm<D>, Linear<D, Vocab>>>>);
// No stage does more work than the fullest one of any other cut; here stage 1.
static_assert(P::device_flops_per_step(1) >= P::device_flops_per_step(0) &&
              P::device_flops_per_step(1) >= P::device_flops_per_step(2));

// With a budget of 1 MiB per device the balanced cut no longer fits stage 0 (its 1F1B
// warm-up keeps 3 micro-batches in flight); the planner moves work off it.
using Tight = Plan<GPT, AutoStages<3>, MemoryBudget<1>, Input<Seq>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>,
                   NumMicroBatch<6>>;
static_assert(Tight::peak_memory_bytes(0) <= (1 << 20) && P::peak_memory_bytes(0) > (1 << 20));

// Tensor-parallel stages: write the Split around the model (or give Default<Split<2>>).
using TP = Plan<Split<2, Embedding<Vocab, D>, PositionEmbedding<Seq, D>, Repeat<4, Attention, MLP>, LayerNorm<D>,
                      Linear<D, Vocab>>,
                AutoStages<2>, Input<Seq>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>, NumMicroBatch<4>, SequenceParallel>;
static_assert(TP::devices_per_replica == 4);

int main() {
  for (int s = 0; s < P::stages; ++s)
    std::printf("stage %d: %lld FLOPs/step, %lld KiB (1 MiB budget: %lld FLOPs/step, %lld KiB)\n", s,
                P::device_flops_per_step(s), P::peak_memory_bytes(s) >> 10, Tight::device_flops_per_step(s),
                Tight::peak_memory_bytes(s) >> 10);
  return 0;
}
