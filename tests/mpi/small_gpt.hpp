// The small GPT the MPI tests train under every plan: token + position embedding, pre-LN
// blocks (causal self-attention, GeLU MLP), final LayerNorm, per-token loss.
#pragma once
#include <strata/strata.hpp>

namespace small_gpt {
using namespace strata;

constexpr int V = 32, S = 8, D = 16, H = 4;
using Attn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>;
using MLP = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;
using CE = Loss<SoftmaxCrossEntropy>;

// Blocks blocks on one strategy
template <template <int, class...> class Strategy, int N, int Blocks, class... Extra>
using on = Plan<Strategy<N, Embedding<V, D>, PositionEmbedding<S, D>, Repeat<Blocks, Attn, MLP>, LayerNorm<D>, Linear<D, V>>,
                Input<S>, CE, Extra...>;
// two blocks, the second pipeline stage from the second block on
template <template <int, class...> class Strategy, int N, class... Extra>
using staged = Plan<Pipeline<Strategy<N, Embedding<V, D>, PositionEmbedding<S, D>, Attn, MLP>,
                             Strategy<N, Attn, MLP, LayerNorm<D>, Linear<D, V>>>,
                    Input<S>, CE, Extra...>;

// the same in four pipeline parts: the embeddings and the first attention, the first MLP,
// the second block, the head
template <template <int, class...> class Strategy, int N, class... Extra>
using quartered = Plan<Pipeline<Strategy<N, Embedding<V, D>, PositionEmbedding<S, D>, Attn>, Strategy<N, MLP>,
                                Strategy<N, Attn, MLP>, Strategy<N, LayerNorm<D>, Linear<D, V>>>,
                       Input<S>, CE, Extra...>;

// four TaskGraphs on the same devices (the embeddings, a block, a block, the head): what
// ZeRO-3 gathers and frees one at a time
template <template <int, class...> class Strategy, int N, class... Extra>
using graphs = Plan<Colocate<Strategy<N, Embedding<V, D>, PositionEmbedding<S, D>>, Strategy<N, Attn, MLP>,
                             Strategy<N, Attn, MLP>, Strategy<N, LayerNorm<D>, Linear<D, V>>>,
                    Input<S>, CE, Extra...>;

}  // namespace small_gpt
