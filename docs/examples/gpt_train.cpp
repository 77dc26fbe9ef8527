// A tiny GPT trained as two processes: Split<2> (head-parallel attention, Megatron MLPs,
// vocabulary-parallel embedding and loss) with sequence parallelism, on random tokens
// whose label is the token before (only attention can learn that). Then the checks: the
// plan against the same layers on one device, with and without activation recomputation,
// and recomputation changing no bit of the trained parameters.
//   mpicxx -std=c++20 -O2 -Iinclude -DSTRATA_WITH_MPI gpt_train.cpp -o gpt_train -lopenblas
//   mpiexec -n 2 ./gpt_train          (-n 4: two replicas of the two devices)
// mpi-ranks: 2 4
#include <cstdint>
#include <cstdio>
#include <exception>
#include <random>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>

using namespace strata;

constexpr int Vocab = 16, Seq = 8, D = 16, Heads = 2;
using Attention = Residual<LayerNorm<D>, CausalSelfAttention<D, Heads, Seq>>;
using MLP = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;
template <class... Options>
using GPT = Plan<Split<2, Embedding<Vocab, D>, PositionEmbedding<Seq, D>, Repeat<2, Attention, MLP>, LayerNorm<D>,
                       Linear<D, Vocab>>,
                 Input<Seq>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>, NumMicroBatch<2>, SequenceParallel,
                 Element<double>, Options...>;
using P = GPT<>;
using Recompute = GPT<GradientCheckpoint<checkpoint_mode::automatic>>;  // every Residual recomputed
static_assert(P::devices_per_replica == 2 && P::replica_batch == 8 && Recompute::recompute_regions == 4);

// The same batch on every rank: random tokens, each labelled with the token before it.
struct batch {
  std::vector<double> tokens;
  std::vector<std::int32_t> labels;
  explicit batch(std::uint64_t seed) : tokens(P::replica_batch * Seq), labels(tokens.size()) {
    std::mt19937_64 g(seed);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = double(g() % Vocab);
      labels[i] = i % Seq == 0 ? 0 : std::int32_t(tokens[i - 1]);
    }
  }
  batch_view<double> view() const { return {.inputs = tokens, .labels = labels, .samples = P::replica_batch}; }
};

template <class Plan, class World>
std::vector<std::vector<std::vector<double>>> train(World& world, int steps, double& first, double& last) {
  auto t = make_trainer<Plan>(world, Adam{.lr = 1e-2});
  for (int s = 0; s < steps; ++s) {
    const double loss = t.step(batch(std::uint64_t(s)).view()).loss;  // the same on every rank
    if (s == 0) first = loss;
    last = loss;
  }
  return t.gather_parameters();
}

int main(int argc, char** argv) {
  auto world = strata::init<Host>(argc, argv);
  try {
    double first = 0, last = 0, rc_first = 0, rc_last = 0;
    const auto params = train<P>(world, 60, first, last);
    const auto rc_params = train<Recompute>(world, 60, rc_first, rc_last);
    const bool learned = last < 0.5 * first, identical = params == rc_params;
    if (world.rank() == 0)
      std::printf("loss %.3f -> %.3f nats/token; recomputation: the same parameters bit for bit: %s\n", first, last,
                  identical ? "yes" : "no");

    const auto r = verify::against_one_device<P>(world, Adam{.lr = 1e-2}, 6, verify::random_data<P>());
    const auto rc = verify::against_one_device<Recompute>(world, Adam{.lr = 1e-2}, 6, verify::random_data<P>());
    if (world.rank() == 0)
      std::printf("TP2 + sequence parallel: %sthe same, recomputing every block: %s", r.text().c_str(),
                  rc.text().c_str());
    return learned && identical && r.ok() && rc.ok() ? 0 : 1;
  } catch (const std::exception& e) {
    return world.fail(e);
  }
}
