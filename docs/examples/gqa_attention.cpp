// Llama 3's attention in a pre-norm block under Split<2> with sequence parallelism: 8 query
// heads sharing 2 key/value heads (groups of 4), causal, rotary positions, no biases. Each
// device holds one key/value group with its 4 query heads — a contiguous cut of w_qkv.
#include <type_traits>

#include <strata/strata.hpp>

using namespace strata;

constexpr int D = 512, Heads = 8, KVHeads = 2, Seq = 128, Vocab = 32000, dh = D / Heads;
template <int KV>
using Llama = Plan<Split<2, Embedding<Vocab, D>,                                               // 0
                         Residual<RMSNorm<D>, LlamaAttention<D, Heads, KV, Seq, 500000>>,      // 1 begin, 2, 3, 4 end
                         Residual<RMSNorm<D>, SwiGLU<D, 4 * D>>, RMSNorm<D>, Linear<D, Vocab>>,
                   Input<Seq>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>, SequenceParallel>;
using P = Llama<KVHeads>;
constexpr auto& attn = P::layer_plans[3];

// LlamaAttention<D, Heads, KVHeads, Seq, RopeBase> is MultiHeadAttention with KVHeads key/value
// heads and no biases: w_qkv [D, (Heads + 2·KVHeads)·dh] (per kv group: its query heads, k, v)
// and w_out [D, D].
static_assert(std::is_same_v<LlamaAttention<D, Heads, KVHeads, Seq, 500000>,
                             MultiHeadAttention<D, Heads, Seq, true, 500000, KVHeads, false>>);
static_assert(attn.desc.num_params == 2 && attn.desc.params[0].shape == shape_v<D, (Heads + 2 * KVHeads) * dh>);

// Head-parallel: one kv group per device, the output projection row-parallel.
static_assert(attn.sig == signature::head_parallel);
static_assert(attn.local_params[0] == shape_v<D, (Heads + 2 * KVHeads) * dh / 2>);  // 4 q heads, k, v
static_assert(attn.local_params[1] == shape_v<D / 2, D>);                           // w_out

// k and v are kept at KVHeads width, so the plan stashes less than with 8 key/value heads
// (multi-head attention, the same block otherwise).
static_assert(P::stash_bytes(0) < Llama<Heads>::stash_bytes(0));

int main() { return 0; }
