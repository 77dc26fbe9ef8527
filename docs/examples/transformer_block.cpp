// A transformer-shaped stack under Split<4>: vocabulary-parallel embedding,
// head-parallel attention, a Megatron MLP and a vocabulary-parallel classifier.
// (strata models are chains of layers: there are no residual connections yet.)
#include <strata/strata.hpp>

using namespace strata;

constexpr int D = 512, Heads = 8, Seq = 128, Vocab = 32000;
using Net = Split<4, Embedding<Vocab, D>,                                 // 0
                  LayerNorm<D>, MultiHeadAttention<D, Heads, Seq>,        // 1, 2
                  LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>,  // 3..6
                  LayerNorm<D>, Linear<D, Vocab>>;                        // 7, 8
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, Input<Seq>, MicroBatch<4>>;

constexpr auto& attn = P::layer_plans[2];

// Two heads per device: QKV is column-parallel, the output projection row-parallel.
static_assert(attn.sig == signature::head_parallel);
static_assert(attn.in_layout == sbp::broadcast && attn.out_layout == sbp::partial);
static_assert(attn.local_params[0] == shape_v<D, 3 * D / 4>);  // w_qkv
static_assert(attn.local_params[1] == shape_v<3 * D / 4>);     // b_qkv
static_assert(attn.local_params[2] == shape_v<D / 4, D>);      // w_out
static_assert(attn.local_params[3] == shape_v<D>);             // b_out, added once
// Backward: the gradient of its whole input is a partial sum, all-reduced.
static_assert(attn.comms[0].kind == collective::all_reduce && attn.comms[0].when == pass::backward);

// Every other tensor-parallel layer gets its Megatron signature.
static_assert(P::layer_plans[0].sig == signature::vocab_embedding);
static_assert(P::layer_plans[4].sig == signature::column_parallel);
static_assert(P::layer_plans[6].sig == signature::row_parallel);
static_assert(P::layer_plans[8].sig == signature::column_parallel);
static_assert(P::layer_plans[9].sig == signature::vocab_loss);

// No layer ever all-gathers: every split output is consumed split or all-reduced.
constexpr bool any_all_gather() {
  for (const auto& lp : P::layer_plans)
    for (int k = 0; k < lp.num_comms; ++k)
      if (lp.comms[k].kind == collective::all_gather) return true;
  return false;
}
static_assert(!any_all_gather());

int main() { return 0; }
