// A GPT over 1024-token sequences with every sequence split over two devices (Context<2>):
// each device holds 512 positions of each sample through the whole model, and attention
// gathers the whole sequence's keys and values. Checked against the same model on one
// device; on 4 processes the plan runs twice (two replicas of CP2), and so does context
// parallelism over tensor parallelism (Context<2, Split<2>>, with SequenceParallel).
//   mpiexec -n 4 ./context_parallel
//   mpicxx -std=c++20 -O2 -Iinclude -DSTRATA_WITH_MPI context_parallel.cpp -o context_parallel -lopenblas
//   mpiexec -n 2 ./context_parallel
// mpi-ranks: 2 4
#include <cstdio>
#include <exception>

#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>
using namespace strata;

constexpr int V = 64, S = 1024, D = 32, H = 4;
using Attn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>;
using MLP = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;
template <int N>
using gpt = Plan<Context<N, Embedding<V, D>, PositionEmbedding<S, D>, Repeat<2, Attn, MLP>, LayerNorm<D>, Linear<D, V>>,
                 Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<1>, NumMicroBatch<2>, Element<double>>;
using P = gpt<2>;

// Every layer holds half of each sample's rows; attention's three collectives (k and v
// gathered forward and again backward, their gradients reduce-scattered) are in the plan.
static_assert(P::context == 2 && P::layer_plans[4].context == 2);
static_assert(P::layer_plans[4].num_comms == 3);
// The stash a device keeps per micro-batch is half of one device's.
static_assert(2 * P::stash_bytes(0) == gpt<1>::stash_bytes(0));

// CP2 x TP2: device c·2 + t holds positions of context index c and tensor shard t of every
// layer; attention splits its heads over the tensor group and gathers k and v over the
// context group, SequenceParallel cuts each context group's pieces over its two devices.
using CT = Plan<Context<2, Split<2, Embedding<V, D>, PositionEmbedding<S, D>, Repeat<2, Attn, MLP>, LayerNorm<D>,
                                 Linear<D, V>>>,
                Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<1>, NumMicroBatch<2>, Element<double>, SequenceParallel>;
static_assert(CT::part_devices == 4 && CT::context == 2 && CT::context_tensor == 2);
static_assert(CT::layer_plans[4].sig == signature::head_parallel &&
              CT::layer_plans[4].comms[CT::layer_plans[4].num_conversion_comms].group == group_axis::context);

int main(int argc, char** argv) {
  auto world = strata::init<Host>(argc, argv);
  try {
    const auto r = verify::against_one_device<P>(world, Adam{.lr = 1e-2}, 3, verify::random_data<P>());
    if (world.rank() == 0) std::printf("%s", r.text().c_str());
    if (!r.ok() || world.size() % CT::devices_per_replica != 0) return r.ok() ? 0 : 1;
    const auto t = verify::against_one_device<CT>(world, Adam{.lr = 1e-2}, 3, verify::random_data<CT>());
    if (world.rank() == 0) std::printf("%s", t.text().c_str());
    return t.ok() ? 0 : 1;
  } catch (const std::exception& e) {
    return world.fail(e);
  }
}
