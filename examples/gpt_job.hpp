// The GPT main job, written once for every backend: a byte-level GPT trained on the
// fortune collections (examples/gpt/text_data.hpp). gpt_train.cpp runs it on CPUs (MPI),
// gpt_train.cu on GPUs (NCCL).
//
// 4 processes: a two-stage pipeline (1F1B, 4 micro-batches), each stage Split<2> —
// head-parallel attention, Megatron MLPs, a vocabulary-parallel embedding and loss —
// with sequence parallelism (LayerNorms and residual adds hold half the tokens each).
// One process: the same layers as a single-device plan.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "agreed_load.hpp"
#include "arguments.hpp"
#include "gpt/reference.hpp"
#include "gpt/text_data.hpp"
#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

namespace gpt_job {

using namespace strata;

constexpr int Vocab = 256, Seq = 128, D = 128, Heads = 4, Blocks = 4;
using Attention = Residual<LayerNorm<D>, CausalSelfAttention<D, Heads, Seq>>;
using MLP = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;
using Block = Repeat<1, Attention, MLP>;

using Net = Pipeline<Split<2, Embedding<Vocab, D>, PositionEmbedding<Seq, D>, Repeat<Blocks / 2, Attention, MLP>>,
                     Split<2, Repeat<Blocks / 2, Attention, MLP>, LayerNorm<D>, Linear<D, Vocab>>>;
using P = Plan<Net, Input<Seq>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>, NumMicroBatch<4>, SequenceParallel>;
using Single = Plan<Replicate<1, Embedding<Vocab, D>, PositionEmbedding<Seq, D>, Repeat<Blocks, Attention, MLP>,
                              LayerNorm<D>, Linear<D, Vocab>>,
                    Input<Seq>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>, NumMicroBatch<4>>;
static_assert(P::devices_per_replica == 4 && P::deadlock_free && P::sequence_parallel);
static_assert(P::num_layers == Single::num_layers);

// What the command line asks for (the same on every rank).
struct job_options {
  int steps = 5000;
  std::string checkpoint = "checkpoints/gpt";  // written every `save_every` steps and at the end
  int save_every = 1000;
  std::string resume;  // a checkpoint to continue from (its step counts toward `steps`)
  int stop_after = 0;  // end after this step without the evaluation (as a crash would); 0: never
  bool async_save = false;  // write checkpoints in the background (committed at the next save or the end)
};

template <class Plan, class World>
int run(World& world, const job_options& o) {
  using M = float;
  const int steps = o.steps;
  const bool leader = world.rank() == 0;
  auto train = make_trainer<Plan, M>(world, AdamW{.lr = 2e-3, .weight_decay = 0.01});
  // GPT's recipe: warm-up, cosine decay to a tenth, no decay on biases and norms, clipping
  train.set_training_options({.schedule = {.kind = lr_schedule::decay::cosine, .warmup = 100, .total = steps,
                                           .final_ratio = 0.1},
                              .decay = decay_on::matrices,
                              .clip_norm = 1.0});
  int first_step = 0;
  if (!o.resume.empty()) {
    const checkpoint_info info = train.load_checkpoint(o.resume);
    if (info.step > steps)  // the same on every rank: the ranks agreed on the checkpoint
      throw agreed_error("checkpoint " + o.resume + " was written after step " + std::to_string(info.step) +
                         ", beyond this run's " + std::to_string(steps) + " steps: pass at least " +
                         std::to_string(info.step) + " steps");
    first_step = static_cast<int>(info.step);  // the data position: batch s is a function of s
    if (leader) std::printf("resumed from %s after step %d\n", o.resume.c_str(), first_step);
  }
  auto save = [&](int done) {
    if (o.async_save) train.save_checkpoint_async(o.checkpoint, {{"data.position", std::to_string(done)}});
    else train.save_checkpoint(o.checkpoint, {{"data.position", std::to_string(done)}});
    if (leader) std::printf("checkpoint after step %d: %s\n", done, o.checkpoint.c_str());
  };
  const int dp = train.data_parallel(), replica = train.coord().data;
  const gpt_text::corpus text = examples::agreed_load(world, [] { return gpt_text::load_for(Seq); });
  if (leader)
    std::printf("strata GPT: %d blocks, D %d, %d heads, context %d, byte vocabulary; %d processes = %d stages x "
                "Split<%d> x DP %d%s; %lld parameters\n"
                "text: %zu collections of %s, %zu bytes training, %zu held out\n",
                Blocks, D, Heads, Seq, world.size(), Plan::stages, Plan::part_devices, dp,
                Plan::sequence_parallel ? " + sequence parallel" : "", Plan::model_parameters,
                text.files.size(), gpt_text::text_dir().c_str(), text.train.size(), text.validation.size());

  const std::size_t per_replica = std::size_t(Plan::replica_batch);
  const double tokens_per_step = double(per_replica) * dp * Seq;
  auto t0 = std::chrono::steady_clock::now();
  double window_loss = 0;
  int window = 0;
  for (int s = first_step; s < steps; ++s) {
    const auto b = gpt_text::training_batch<M>(text.train, Seq, 2026, std::uint64_t(s), replica, dp, per_replica);
    const step_result r = train.step({.inputs = b.inputs, .labels = b.labels, .samples = b.samples});
    window_loss += r.loss, ++window;
    if (leader && ((s + 1) % 25 == 0 || s + 1 == steps)) {
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("step %4d/%d  loss %.4f nats/token  %.0f tokens/s\n", s + 1, steps, window_loss / window,
                  tokens_per_step * (s + 1 - first_step) / secs);
      std::fflush(stdout);
      window_loss = 0, window = 0;
    }
    if ((s + 1) % o.save_every == 0 || s + 1 == steps) save(s + 1);
    if (s + 1 == o.stop_after) {
      if (leader) std::printf("stopping after step %d (--stop-after)\n", s + 1);
      return 0;
    }
  }

  // Validation: the held-out windows, each replica evaluating every dp-th one (padded).
  const auto mine = gpt_text::validation_windows<M>(text.validation, Seq, 256, replica, dp, per_replica);
  const step_result v =
      train.evaluate({.inputs = mine.w.inputs, .labels = mine.w.labels, .samples = mine.w.samples}, mine.valid);
  const double baseline = gpt_text::unigram_entropy(text.validation);

  // The trained model in plain float64 (gpt/reference.hpp), on every rank: one held-out
  // window's loss against the distributed evaluation of that window, then a sample.
  const auto params = train.gather_parameters();
  const gpt_reference::config cfg{Vocab, Seq, D, Heads, Blocks, 4 * D};
  const double ref = gpt_reference::window_loss(cfg, params, reinterpret_cast<const unsigned char*>(text.validation.data()));
  gpt_text::windows<M> first;
  for (std::size_t i = 0; i < per_replica; ++i) first.add(text.validation, 0, Seq);
  const step_result one = train.evaluate({.inputs = first.inputs, .labels = first.labels, .samples = first.samples}, 1);
  if (leader) {
    std::printf("validation tokens: %lld\n", v.rows);
    std::printf("validation loss: %.4f nats/token (unigram baseline: %.4f)\n", v.loss, baseline);
    std::printf("float64 reference forward, first held-out window: %.6f nats/token (strata: %.6f)\n", ref, one.loss);
    const std::string prompt = "The meaning of life is";
    gpt_reference::model m(cfg, params);
    std::mt19937_64 g(7);
    std::string out = prompt;
    std::vector<double> z;
    for (char ch : prompt) z = m.next(static_cast<unsigned char>(ch));
    while (m.position() < Seq) {
      double top = *std::max_element(z.begin(), z.end());
      std::vector<double> w(z.size());
      for (std::size_t i = 0; i < z.size(); ++i) w[i] = std::exp((z[i] - top) / 0.7);  // temperature 0.7
      const int next = std::discrete_distribution<int>(w.begin(), w.end())(g);
      out += static_cast<char>(next);
      z = m.next(next);
    }
    std::printf("sample (prompt \"%s\", temperature 0.7):\n%s\n", prompt.c_str(), out.c_str());
  }
  return 0;
}

// `prog [steps] [--checkpoint DIR] [--save-every N] [--async-save] [--resume DIR] [--stop-after N]`: every rank reads the
// same arguments, so a bad one stops every rank before any collective.
template <class World>
int run_job(World& world, int argc, char** argv) {
  job_options o;
  using examples::positive_int;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) throw agreed_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--checkpoint") o.checkpoint = value();
    else if (a == "--resume") o.resume = value();
    else if (a == "--save-every") o.save_every = positive_int(a, value());
    else if (a == "--stop-after") o.stop_after = positive_int(a, value());
    else if (a == "--async-save") o.async_save = true;
    else if (i == 1 && !a.starts_with("-")) o.steps = positive_int("steps", a);
    else throw agreed_error("unknown argument '" + a + "' (usage: gpt_train [steps] [--checkpoint DIR] "
                            "[--save-every N] [--async-save] [--resume DIR] [--stop-after N])");
  }
  if (world.size() == 1) return run<Single>(world, o);
  return run<P>(world, o);
}

}  // namespace gpt_job
