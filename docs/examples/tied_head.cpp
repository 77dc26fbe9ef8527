// A GPT whose output head reads its input embedding's table (GPT-2's tie), cut over two
// pipeline stages: each stage keeps a copy of the table and their gradients are summed
// after the reduction, so the plan trains what one device trains.
//   mpicxx -std=c++20 -O2 -Iinclude -DSTRATA_WITH_MPI tied_head.cpp -o tied_head -lopenblas
//   mpiexec -n 2 ./tied_head
// mpi-ranks: 2
#include <cstdio>
#include <exception>

#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>
using namespace strata;

constexpr int V = 64, S = 16, D = 32, H = 4;
using Attn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>;
using MLP = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;
using P = Plan<Pipeline<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, Attn, MLP>,
                        Replicate<1, Attn, MLP, LayerNorm<D>, TiedHead<V, D>>>,
               Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<2>, NumMicroBatch<4>, Element<double>>;

// The plan found the Embedding (layer 0) the head's table belongs to.
static_assert(P::tie.owner == 0 && P::tie.user == P::num_layers - 2);

int main(int argc, char** argv) {
  auto world = strata::init<Host>(argc, argv);
  try {
    const auto r = verify::against_one_device<P>(world, Adam{.lr = 1e-2}, 5, verify::random_data<P>());
    if (world.rank() == 0) std::printf("%s", r.text().c_str());
    return r.ok() ? 0 : 1;
  } catch (const std::exception& e) {
    return world.fail(e);
  }
}
