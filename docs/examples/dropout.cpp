// Dropout on a GPT's residual branches, on its MLP's hidden activations and on its attention
// probabilities. The mask is a function of (seed, step, layer, global sample, position,
// feature) — never of the plan — so a plan with any parallelism drops the same elements as
// one device. Here: where the planner puts the dropouts under Split<2> + SequenceParallel, and
// on one device training (masks) against evaluation (none).
#include <cstdio>
#include <random>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

using namespace strata;

constexpr int V = 64, S = 16, D = 32, H = 4;
// attention dropout 10% (CausalSelfAttention<D, Heads, Seq, RopeBase, AttnDropout>): feature
// = global query head · S + key position, inside the flash kernels
using Attn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S, 0, 10>, Dropout<10>>;              // 2 .. 6
using MLP = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Dropout<10>, Linear<4 * D, D>, Dropout<10>>;  // 7 .. 14
template <template <int, class...> class Strategy, int N, class... Options>
using GPT = Plan<Strategy<N, Embedding<V, D>, PositionEmbedding<S, D>, Repeat<2, Attn, MLP>, LayerNorm<D>, Linear<D, V>>,
                 Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>, Options...>;

// Under Split<2> + SequenceParallel the hidden Dropout (layer 11) masks its device's half of
// the 4·D features, at their global indices; the branch's Dropout (13) receives the
// row-parallel Linear's partial sum reduce-scattered to a row split: a mask of partial sums
// would not be the mask of their sum.
using TP = GPT<Split, 2, SequenceParallel>;
static_assert(TP::layer_plans[11].desc.name == "Dropout" && TP::layer_plans[11].in_layout == sbp::split_feature);
static_assert(TP::layer_plans[13].arrives == sbp::partial && TP::layer_plans[13].in_layout == sbp::split_batch);
static_assert(TP::layer_plans[13].comms[0].kind == collective::reduce_scatter);
// The backward recomputes the mask from the coordinates: Dropout keeps nothing, and
// Dropout<0> is a view (no kernel). The attention is head-parallel: device d holds heads 2d
// and 2d + 1 of the 4 and draws their masks at those global indices; its dropout stashes nothing.
static_assert(layers::Dropout<10>::memory({}).stash_values == 0 && layers::Dropout<0>::memory({}).view);
static_assert(TP::layer_plans[4].sig == signature::head_parallel);
static_assert(layers::CausalSelfAttention<D, H, S, 0, 10>::memory({.rows = 4 * S}).stash_values ==
              layers::CausalSelfAttention<D, H, S>::memory({.rows = 4 * S}).stash_values);

using One = GPT<Replicate, 1, Element<double>>;

int main() {
  auto world = local_world<Host>();
  auto t = make_trainer<One>(world, AdamW{.lr = 3e-3}, 7);  // the seed of the weights and the masks
  std::mt19937_64 g(1);
  std::vector<double> x(4 * S);
  std::vector<std::int32_t> y(4 * S);
  for (int step = 1; step <= 4; ++step) {
    for (auto& v : x) v = double(g() % V);
    for (auto& v : y) v = std::int32_t(g() % V);
    const batch_view<double> b{.inputs = x, .labels = y, .samples = 4};
    const double evaluated = t.evaluate(b, 4).loss;  // no dropout: the same loss every time
    if (t.evaluate(b, 4).loss != evaluated) return 1;
    const double trained = t.step(b).loss;  // this step's masks
    std::printf("step %d: loss %.4f evaluated, %.4f in training with dropout\n", step, evaluated, trained);
  }
  return 0;
}
