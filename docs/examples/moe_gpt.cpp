// A GPT whose second block has a mixture of experts in place of its MLP: 4 experts, top-2
// routing, capacity 1.25, Switch's load-balancing loss. It trains on one device or data
// parallel (the step's loss is the cross-entropy plus the load-balancing loss); under 2
// processes it checks itself against the same model on one device.
// mpi-ranks: 1 2
#include <cstdio>

#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>

using namespace strata;

constexpr int V = 64, S = 16, D = 32, H = 4;
using Attn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>;
using MLP = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;
// MoE<Experts, D, Hidden, TopK, CapacityPercent, AuxPercentMille>: alpha = 10/1000
using Experts = Residual<LayerNorm<D>, MoE<4, D, 2 * D, 2, 125, 10>>;
using Net = Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, Attn, MLP, Attn, Experts, LayerNorm<D>, Linear<D, V>>;
using P = Plan<Net, Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>, Element<double>>;

// the MoE layer's tensors: the router D × 4, the experts' 4 × D × 2D and 4 × 2D × D
constexpr int moe_at = [] {
  for (int i = 0; i < P::num_layers; ++i)
    if (P::layer_plans[static_cast<std::size_t>(i)].desc.role == layer_role::moe) return i;
  return -1;
}();
constexpr auto& moe = P::layer_plans[static_cast<std::size_t>(moe_at)];
static_assert(moe.local_params[0] == shape_v<D, 4> && moe.local_params[1] == shape_t{3, {4, D, 2 * D, 0}} &&
              moe.local_params[2] == shape_t{3, {4, 2 * D, D, 0}});

int main(int argc, char** argv) {
  auto world = init<Host>(argc, argv);
  // every replica routes its own micro-batches exactly as one device does (capacity is per
  // device and micro-batch), so even dropped tokens match
  const verify::report r = verify::against_one_device<P>(world, AdamW{.lr = 3e-3, .weight_decay = 0.1}, 6,
                                                         verify::random_data<P>(), 1e-9);
  if (world.rank() == 0) std::printf("%s", r.text().c_str());
  return r.ok() ? 0 : 1;
}
