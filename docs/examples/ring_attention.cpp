// Ring attention: a Llama-style model (rotary grouped-query attention, RMSNorm, SwiGLU) with
// every sequence split over two devices (Context<2>) and attention passing key/value blocks
// around the devices (ContextRing) instead of gathering the whole sequence. Checked against
// the same model on one device; on 4 processes the plan runs twice (two replicas of CP2).
//   mpicxx -std=c++20 -O2 -Iinclude -DSTRATA_WITH_MPI ring_attention.cpp -o ring_attention -lopenblas
//   mpiexec -n 2 ./ring_attention
// mpi-ranks: 2 4
#include <cstdio>
#include <exception>

#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>
using namespace strata;

constexpr int V = 64, S = 256, D = 32, H = 4, KV = 2;
using Attn = Residual<RMSNorm<D>, LlamaAttention<D, H, KV, S>>;
using MLP = Residual<RMSNorm<D>, SwiGLU<D, 64>>;
template <int N, class... Exchange>
using llama = Plan<Context<N, Embedding<V, D>, Repeat<2, Attn, MLP>, RMSNorm<D>, Linear<D, V, false>>, Input<S>,
                   Loss<SoftmaxCrossEntropy>, MicroBatch<1>, NumMicroBatch<2>, Element<double>, Exchange...>;
using P = llama<2, ContextRing>;

// Attention's messages are the ring's: each device's k and v sent on once forward (N − 1 = 1
// step), once backward, and their gradients twice (N steps: the last brings them home).
constexpr auto& attn = P::layer_plans[3];
static_assert(attn.exchange == context_mode::ring && attn.num_comms == 3);
static_assert(attn.comms[0].kind == collective::send_recv && attn.comms[2].calls == 2);
// The ring holds a few blocks of the device's own k and v; the all-gather the whole sequence's.
static_assert(P::activation_arena_bytes(0) < llama<2>::activation_arena_bytes(0));

int main(int argc, char** argv) {
  auto world = strata::init<Host>(argc, argv);
  try {
    const auto r = verify::against_one_device<P>(world, Adam{.lr = 1e-2}, 3, verify::random_data<P>());
    if (world.rank() == 0) std::printf("%s", r.text().c_str());
    return r.ok() ? 0 : 1;
  } catch (const std::exception& e) {
    return world.fail(e);
  }
}
