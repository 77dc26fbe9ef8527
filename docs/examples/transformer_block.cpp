// A pre-LN transformer block under Split<4>: x + attn(LN(x)), then x + mlp(LN(x)), between a
// vocabulary-parallel embedding (with learned positions) and a vocabulary-parallel head.
// Attention is head-parallel, the MLP a Megatron pair; each branch ends in a partial sum
// that its ResidualEnd all-reduces once, into the skip connection's whole layout.
#include <strata/strata.hpp>

using namespace strata;

constexpr int D = 512, Heads = 8, Seq = 128, Vocab = 32000;
using Net = Split<4, Embedding<Vocab, D>, PositionEmbedding<Seq, D>,              // 0, 1
                  Residual<LayerNorm<D>, CausalSelfAttention<D, Heads, Seq>>,     // 2 begin, 3, 4, 5 end
                  Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>,  // 6 begin, 7..10, 11 end
                  LayerNorm<D>, Linear<D, Vocab>>;                                // 12, 13
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, Input<Seq>, MicroBatch<4>>;
static_assert(P::num_layers == 15);  // the loss is layer 14

constexpr auto& attn = P::layer_plans[4];

// Two heads per device: QKV is column-parallel, the output projection row-parallel.
static_assert(attn.sig == signature::head_parallel);
static_assert(attn.in_layout == sbp::broadcast && attn.out_layout == sbp::partial);
static_assert(attn.local_params[0] == shape_v<D, 3 * D / 4>);  // w_qkv: two heads' [q|k|v] blocks
static_assert(attn.local_params[1] == shape_v<3 * D / 4>);     // b_qkv
static_assert(attn.local_params[2] == shape_v<D / 4, D>);      // w_out
static_assert(attn.local_params[3] == shape_v<D>);             // b_out, added once
// Backward: the gradient of its whole input is a partial sum, all-reduced.
static_assert(attn.comms[0].kind == collective::all_reduce && attn.comms[0].when == pass::backward);

// The skip connection keeps the block input's layout (whole); the branch's partial sum is
// all-reduced once, at the ResidualEnd, and added to it.
constexpr auto& end = P::layer_plans[5];
static_assert(P::layer_plans[2].out_layout == sbp::broadcast);
static_assert(end.arrives == sbp::partial && end.in_layout == sbp::broadcast && end.out_layout == sbp::broadcast);
static_assert(end.num_comms == 1 && end.comms[0].kind == collective::all_reduce &&
              end.comms[0].when == pass::forward && end.comms[0].elems == 4 * Seq * D);

// Every other tensor-parallel layer gets its Megatron signature.
static_assert(P::layer_plans[0].sig == signature::vocab_embedding);
static_assert(P::layer_plans[8].sig == signature::column_parallel);
static_assert(P::layer_plans[10].sig == signature::row_parallel);
static_assert(P::layer_plans[13].sig == signature::column_parallel);
static_assert(P::layer_plans[14].sig == signature::vocab_loss);

// Forward all-reduces of activations: after the embedding, and one per residual branch.
constexpr int forward_all_reduces() {
  int n = 0;
  for (int i = 0; i < 14; ++i)
    for (int k = 0; k < P::layer_plans[i].num_comms; ++k) {
      const comm_desc& c = P::layer_plans[i].comms[k];
      n += c.kind == collective::all_reduce && c.when == pass::forward;
    }
  return n;
}
static_assert(forward_all_reduces() == 3);

// No layer ever all-gathers: every split output is consumed split or all-reduced.
constexpr bool any_all_gather() {
  for (const auto& lp : P::layer_plans)
    for (int k = 0; k < lp.num_comms; ++k)
      if (lp.comms[k].kind == collective::all_gather) return true;
  return false;
}
static_assert(!any_all_gather());

int main() { return 0; }
