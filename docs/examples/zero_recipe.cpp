// ZeRO-1 and the training recipe of a GPT run: optimizer state partitioned over the
// data-parallel replicas (the memory analysis says by how much), a warm-up + cosine
// learning-rate schedule, no weight decay on biases and norms, global-norm clipping.
// Under 2 processes it checks itself against the same model on one device.
// mpi-ranks: 1 2
#include <cstdio>

#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>

using namespace strata;

constexpr int V = 64, S = 16, D = 32, H = 4;
using Block = Repeat<2, Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>,
                     Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>>;
using Net = Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, Block, LayerNorm<D>, Linear<D, V>>;
using Plain = Plan<Net, Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>, World<8>, Element<double>>;
using Z = Plan<Net, Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>, World<8>, Element<double>, Zero<1>>;

// 8 replicas: each keeps an eighth of Adam's moments (plus each bucket's short tail)
static_assert(Z::adam_state_bytes(0) < Plain::adam_state_bytes(0) / 8 + 2 * 5 * 8 * 8);
// the gradient buckets are reduce-scattered and the parameters all-gathered instead
static_assert(Z::communication(0).rows[0].kind == collective::reduce_scatter);

int main(int argc, char** argv) {
  auto world = init<Host>(argc, argv);
  using P = Plan<Net, Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>, Element<double>, Zero<1>>;
  const training_options recipe{
      .schedule = {.kind = lr_schedule::decay::cosine, .warmup = 2, .total = 8, .final_ratio = 0.1},
      .decay = decay_on::matrices,  // biases, LayerNorm gains and shifts are not decayed
      .clip_norm = 1.0};            // ‖g‖ over the whole model, every parameter counted once
  const verify::report r = verify::against_one_device<P>(world, AdamW{.lr = 3e-3, .weight_decay = 0.1}, 8,
                                                         verify::random_data<P>(), 1e-9, 0x5eed, recipe);
  if (world.rank() == 0) std::printf("%s", r.text().c_str());
  return r.ok() ? 0 : 1;
}
