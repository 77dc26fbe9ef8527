// Activation memory per transformer layer: strata's buffer plan against Korthikanti et al.
// 2022 ("Reducing Activation Recomputation in Large Transformer Models", arXiv:2205.05198),
// Table 2, whose per-layer formulas (16-bit activations, 1-byte dropout masks, in bytes) are
//   tensor parallelism t:                         s·b·h · (10 + 24/t + 5·a·s/(h·t))
//   ... with selective recomputation:             s·b·h · (10 + 24/t)
//   ... with sequence parallelism:                s·b·h · (34/t + 5·a·s/(h·t))
//   ... with sequence parallelism and selective:  s·b·h · 34/t
//   full recomputation (the layer's input):       s·b·h · 2
// The layers are the shapes of Megatron-LM's Table 1 (arXiv:2104.04473), s = 2048, b = 1,
// bf16: a GPT-2 block with dropout 0.1 on the attention probabilities and on both residual
// branches. strata's figure is what the lowered plan keeps per micro-batch (Plan::stash_bytes)
// for two blocks less one block, in units of s·b·h bytes.
#include <cstdio>

#include <strata/strata.hpp>

namespace {

using namespace strata;

constexpr int Seq = 2048, Vocab = 256;

template <int H, int Heads>
using Attn = Residual<LayerNorm<H>, CausalSelfAttention<H, Heads, Seq, 0, 10>, Dropout<10>>;
template <int H>
using MLP = Residual<LayerNorm<H>, Linear<H, 4 * H>, GeLU, Linear<4 * H, H>, Dropout<10>>;
template <int H, int Heads, int T, int L, class... O>
using GPT = Plan<Split<T, Embedding<Vocab, H>, PositionEmbedding<Seq, H>, Repeat<L, Attn<H, Heads>, MLP<H>>, LayerNorm<H>,
                       Linear<H, Vocab>>,
                 Input<Seq>, Loss<SoftmaxCrossEntropy>, MicroBatch<1>, Element<bf16>, O...>;

// one layer's stash, in units of s·b·h bytes
template <int H, int Heads, int T, class... O>
constexpr double per_layer() {
  return static_cast<double>(GPT<H, Heads, T, 2, O...>::stash_bytes(0) - GPT<H, Heads, T, 1, O...>::stash_bytes(0)) /
         (double(Seq) * H);
}

template <int H, int Heads, int T>
void row(const char* name) {
  const double t = T, as_h = double(Heads) * Seq / H;
  using RC = GradientCheckpoint<checkpoint_mode::automatic>;
  // at t = 1 there is nothing to split: SequenceParallel is rule [sequence-parallel]'s error
  double sp = 0, sp_rc = 0;
  if constexpr (T == 1) sp = per_layer<H, Heads, T>(), sp_rc = per_layer<H, Heads, T, RC>();
  else sp = per_layer<H, Heads, T, SequenceParallel>(), sp_rc = per_layer<H, Heads, T, SequenceParallel, RC>();
  std::printf("| %s | %d | %d | %d | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", name, H, Heads, T, as_h,
              10 + 24 / t + 5 * as_h / t, 10 + 24 / t, per_layer<H, Heads, T>(), 34 / t, sp, 2.0, sp_rc);
}

}  // namespace

int main() {
  std::printf("| model | h | a | t | a·s/h | paper: TP | paper: TP + selective | strata: TP | paper: TP + SP + selective | "
              "strata: TP + SP | paper: full recompute | strata: TP + SP, every Residual recomputed |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  row<2304, 24, 1>("1.7B");
  row<3072, 32, 2>("3.6B");
  row<4096, 32, 4>("7.5B");
  row<6144, 48, 8>("18.4B");
  row<8192, 64, 8>("39.1B");
  row<10240, 80, 8>("76.1B");
  row<12288, 96, 8>("145.6B");
  row<16384, 128, 8>("310.1B");
  row<20480, 128, 8>("529.6B");
  row<25600, 160, 8>("1008B");
  return 0;
}
