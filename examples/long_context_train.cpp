// A long-context example: the byte-level GPT of the main job (4 pre-LN blocks, D 128, 4
// heads) over 2048-byte windows of the fortune collections, every window split over the
// processes by context parallelism (Context<N>, N = the world size: 1, 2 or 4), each process
// holding 2048/N positions of every sequence through the whole model — or, with --tp2 on 4
// processes, context parallelism over tensor parallelism (Context<2, Split<2>>: two context
// groups of two, each holding 1024 positions and sharding every layer two ways).
//   mpiexec -n 4 ./long_context_train [steps] [--all-to-all | --ring] [--tp2]
// First the plan is checked against one device (float64, two steps on random tokens); then
// it trains `steps` steps (default 200) of two windows each, evaluates held-out windows and
// recomputes the first one's loss with a plain float64 forward of the trained parameters.
#include <chrono>
#include <cstdio>
#include <string>

#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>

#include "agreed_load.hpp"
#include "arguments.hpp"
#include "gpt/reference.hpp"
#include "gpt/text_data.hpp"

namespace {

using namespace strata;

constexpr int Vocab = 256, Seq = 2048, D = 128, Heads = 4, Blocks = 4;
using Attention = Residual<LayerNorm<D>, CausalSelfAttention<D, Heads, Seq>>;
using MLP = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;
// Context<N, Split<1, ...>> is Context<N, ...>: TP = 1 is context parallelism alone
template <int N, int TP, class Exchange, class T>
using GPT = Plan<Context<N, Split<TP, Embedding<Vocab, D>, PositionEmbedding<Seq, D>, Repeat<Blocks, Attention, MLP>,
                                  LayerNorm<D>, Linear<D, Vocab>>>,
                 Input<Seq>, Loss<SoftmaxCrossEntropy>, MicroBatch<1>, NumMicroBatch<2>, Element<T>, Exchange>;

template <int N, int TP, class Exchange, class World>
int run(World& world, int steps) {
  using M = float;
  using P = GPT<N, TP, Exchange, M>;
  const bool leader = world.rank() == 0;
  {  // the plan against one device, in float64
    using Check = GPT<N, TP, Exchange, double>;
    const auto r = verify::against_one_device<Check>(world, Adam{.lr = 1e-3}, 2, verify::random_data<Check>());
    if (leader) std::printf("%s", r.text().c_str());
    if (!r.ok()) return 1;
  }
  auto train = make_trainer<P, M>(world, AdamW{.lr = 2e-3, .weight_decay = 0.01});
  train.set_training_options({.schedule = {.kind = lr_schedule::decay::cosine, .warmup = 20, .total = steps,
                                           .final_ratio = 0.1},
                              .decay = decay_on::matrices,
                              .clip_norm = 1.0});
  const int dp = train.data_parallel(), replica = train.coord().data;
  const gpt_text::corpus text = examples::agreed_load(world, [] { return gpt_text::load_for(Seq); });
  if (leader)
    std::printf("strata long-context GPT: %d blocks, D %d, %d heads, context %d; %d processes = Context<%d> (%s) x "
                "Split<%d> x DP %d; each holds %d positions of every window\n",
                Blocks, D, Heads, Seq, world.size(), P::context, to_string(P::context_exchange).data(),
                P::context_tensor, dp, Seq / P::context);
  const std::size_t per_replica = std::size_t(P::replica_batch);
  const auto t0 = std::chrono::steady_clock::now();
  double window_loss = 0;
  int window = 0;
  for (int s = 0; s < steps; ++s) {
    const auto b = gpt_text::training_batch<M>(text.train, Seq, 2026, std::uint64_t(s), replica, dp, per_replica);
    window_loss += train.step({.inputs = b.inputs, .labels = b.labels, .samples = b.samples}).loss, ++window;
    if (leader && ((s + 1) % 20 == 0 || s + 1 == steps)) {
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("step %4d/%d  loss %.4f nats/token  %.0f tokens/s\n", s + 1, steps, window_loss / window,
                  double(per_replica) * dp * Seq * (s + 1) / secs);
      std::fflush(stdout);
      window_loss = 0, window = 0;
    }
  }
  const auto mine = gpt_text::validation_windows<M>(text.validation, Seq, 16, replica, dp, per_replica);
  const step_result v =
      train.evaluate({.inputs = mine.w.inputs, .labels = mine.w.labels, .samples = mine.w.samples}, mine.valid);
  const auto params = train.gather_parameters();
  const gpt_reference::config cfg{Vocab, Seq, D, Heads, Blocks, 4 * D};
  const double ref =
      gpt_reference::window_loss(cfg, params, reinterpret_cast<const unsigned char*>(text.validation.data()));
  gpt_text::windows<M> first;
  for (std::size_t i = 0; i < per_replica; ++i) first.add(text.validation, 0, Seq);
  const step_result one = train.evaluate({.inputs = first.inputs, .labels = first.labels, .samples = first.samples}, 1);
  if (leader) {
    std::printf("validation loss: %.4f nats/token over %lld tokens (unigram baseline: %.4f)\n", v.loss, v.rows,
                gpt_text::unigram_entropy(text.validation));
    std::printf("float64 reference forward, first held-out window: %.6f nats/token (strata: %.6f)\n", ref, one.loss);
  }
  return 0;
}

template <int N, int TP, class World>
int run_exchange(World& world, int steps, const std::string& mode) {
  if (mode == "--all-to-all") return run<N, TP, ContextAllToAll>(world, steps);
  if (mode == "--ring") return run<N, TP, ContextRing>(world, steps);
  return run<N, TP, ContextAllGather>(world, steps);
}

}  // namespace

int main(int argc, char** argv) {
  auto world = strata::init<strata::Host>(argc, argv);
  try {
    int steps = 200;
    std::string mode;
    bool tp2 = false;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--all-to-all" || a == "--ring") mode = a;
      else if (a == "--tp2") tp2 = true;
      else if (i == 1) steps = examples::positive_int("steps", a);
      else
        throw agreed_error("unknown argument '" + a +
                           "' (usage: long_context_train [steps] [--all-to-all | --ring] [--tp2])");
    }
    if (tp2 && world.size() != 4)
      throw agreed_error("--tp2 (Context<2, Split<2>>) runs on 4 processes, not " + std::to_string(world.size()));
    switch (world.size()) {
      case 1: return run<1, 1, ContextAllGather>(world, steps);  // one process exchanges nothing
      case 2: return run_exchange<2, 1>(world, steps, mode);
      case 4: return tp2 ? run_exchange<2, 2>(world, steps, mode) : run_exchange<4, 1>(world, steps, mode);
      default: throw agreed_error("long_context_train runs on 1, 2 or 4 processes, not " + std::to_string(world.size()));
    }
  } catch (const std::exception& e) {
    return world.fail(e);
  }
}
