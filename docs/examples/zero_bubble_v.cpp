// ZB-V (Qi et al. 2024): two pipeline parts per stage placed in a V — stage s runs parts
// s and 2p − 1 − s — with every backward split into B and W as in ZB-H1. A micro-batch
// goes down the stages and back up; stage 0 holds the embeddings and the head. DualPipeV
// (DeepSeek's DualPipe cut to a V) runs the same V in DualPipe's fixed order.
#include <cstdio>

#include <strata/strata.hpp>

using namespace strata;

constexpr int V = 1024, S = 128, D = 256, H = 8;
using Attn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>;
using MLP = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;
// eight parts on four stages
using Net = Pipeline<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, Attn>, Replicate<1, MLP>,
                     Replicate<1, Attn>, Replicate<1, MLP>, Replicate<1, Attn>, Replicate<1, MLP>,
                     Replicate<1, Attn>, Replicate<1, MLP, LayerNorm<D>, Linear<D, V>>>;

template <class Sched>
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, Input<S>, MicroBatch<4>, NumMicroBatch<8>, Schedule<Sched>>;
using ZBV = P<ZeroBubbleV>;
using I2 = P<Interleaved<2>>;  // the same parts and stages, placed c·p + s
using DPV = P<DualPipeV>;      // the same V; steady state F0 B1 F1 B0; needs m >= 2p

static_assert(ZBV::stages == 4 && ZBV::split_backward && ZBV::deadlock_free);
// the V: stage 0 runs parts 0 and 7, stage 3 parts 3 and 4 (handed over in place)
static_assert(ZBV::part_of(0, 1) == 7 && ZBV::part_of(3, 1) == 4 && I2::part_of(0, 1) == 4);

// One unit per F, B and W of a part: the last stage waits p − 1 = 3 forwards, then never
// idles — (p − 1) / (6m + p − 1) = 3 / 51 — where interleaved 1F1B (a backward = B + W)
// idles (p − 1) / V of a stage's F + B + W = 9 units: 9 / 57.
static_assert(ZBV::bubble == sched::fraction{3, 51});
static_assert(I2::bubble == sched::fraction{9, 57});

// The price of the V is messages, not memory: at most 2p = 8 part-activations per stage,
// 1F1B's p micro-batches of a whole stage.
constexpr bool within_1f1b_memory() {
  for (int s = 0; s < ZBV::stages; ++s)
    if (ZBV::peak_in_flight(s) > 2 * ZBV::stages) return false;
  return true;
}
static_assert(within_1f1b_memory());

// DualPipeV's fixed order meets the same bound (6m + p − 1 units: 3 / 51) with one
// part-activation more per stage at most.
static_assert(DPV::deadlock_free && DPV::part_of(0, 1) == 7 && DPV::bubble == sched::fraction{3, 51});
static_assert(DPV::peak_in_flight(0) <= 2 * DPV::stages + 1);

int main() {
  std::printf("ZB-V: %d stages, bubble %lld/%lld; interleaved 1F1B %lld/%lld\n", ZBV::stages, ZBV::bubble.num,
              ZBV::bubble.den, I2::bubble.num, I2::bubble.den);
  return 0;
}
