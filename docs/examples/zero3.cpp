// ZeRO-3: parameters, gradients and optimizer state partitioned over the data-parallel
// replicas. Each block is its own TaskGraph: a TaskGraph's weights are all-gathered right
// before its layers run and its gradients reduce-scattered right after its backward, so a
// device holds about 1/dp of the model plus two TaskGraphs' worth of slots.
// Under 2 processes it checks itself against the same model on one device.
// mpi-ranks: 1 2
#include <cstdio>

#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>

using namespace strata;

constexpr int V = 64, S = 16, D = 32, H = 4;
using Block = Replicate<1, Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>,
                        Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>>;
using Net = Colocate<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>>, Block, Block, Block, Block,
                     Replicate<1, LayerNorm<D>, Linear<D, V>>>;
template <int Level, class... More>
using GPT = Plan<Net, Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>, Element<double>, Zero<Level>, More...>;

// per device on 8 replicas: the masters and the gradients are an eighth of the model plus
// two slots of the largest TaskGraph (a block); Adam's moments an eighth
constexpr long long model = GPT<0>::stage_param_elems(0), slot = GPT<3>::staging_elems(0);
static_assert(GPT<3, World<8>>::parameter_bytes(0) < (model / 8 + 64 + 2 * slot) * 8);
static_assert(GPT<3, World<8>>::gradient_bytes(0) == GPT<2, World<8>>::gradient_bytes(0));
template <class P>
constexpr long long model_state = P::parameter_bytes(0) + P::gradient_bytes(0) + P::adam_state_bytes(0);
static_assert(model_state<GPT<3, World<8>>> < model_state<GPT<0, World<8>>> / 2);

int main(int argc, char** argv) {
  auto world = init<Host>(argc, argv);
  const verify::report r = verify::against_one_device<GPT<3>>(world, AdamW{.lr = 3e-3, .weight_decay = 0.1}, 6,
                                                              verify::random_data<GPT<3>>(), 1e-9);
  if (world.rank() == 0) std::printf("%s", r.text().c_str());
  return r.ok() ? 0 : 1;
}
