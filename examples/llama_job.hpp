// The main job, written once for every backend: a Llama-style decoder trained on BPE
// tokens of the fortune collections (SentencePiece, examples/gpt/token_data.hpp).
// llama_train.cpp runs it on CPUs (MPI).
//
// The model: an Embedding tied to the output head (TiedHead), 4 pre-RMSNorm blocks of
// grouped-query causal attention with rotary positions (4 query heads over 2 key/value
// heads, no biases: LlamaAttention) and a SwiGLU MLP, a final RMSNorm; vocabulary 2048,
// context 128 tokens, D 128.
// 4 processes: a two-stage pipeline (1F1B, 4 micro-batches), each stage Split<2> —
// head-parallel attention over whole key/value groups, Megatron's SwiGLU, a
// vocabulary-parallel embedding, head and loss — with sequence parallelism; the table is
// held by both stages, its gradients summed after the reduction. One process: the same
// layers as a single-device plan.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "agreed_load.hpp"
#include "arguments.hpp"
#include "gpt/text_data.hpp"
#include "gpt/token_data.hpp"
#include "llama/reference.hpp"
#include <strata/data/token_windows.hpp>
#include <strata/hf.hpp>
#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

namespace llama_job {

using namespace strata;

constexpr int Vocab = 2048, Seq = 128, D = 128, Heads = 4, KVHeads = 2, Hidden = 352, Blocks = 4;
using Attention = Residual<RMSNorm<D>, LlamaAttention<D, Heads, KVHeads, Seq>>;
using MLP = Residual<RMSNorm<D>, SwiGLU<D, Hidden>>;

using Net = Pipeline<Split<2, Embedding<Vocab, D>, Repeat<Blocks / 2, Attention, MLP>>,
                     Split<2, Repeat<Blocks / 2, Attention, MLP>, RMSNorm<D>, TiedHead<Vocab, D>>>;
using P = Plan<Net, Input<Seq>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>, NumMicroBatch<4>, SequenceParallel>;
using Single = Plan<Replicate<1, Embedding<Vocab, D>, Repeat<Blocks, Attention, MLP>, RMSNorm<D>, TiedHead<Vocab, D>>,
                    Input<Seq>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>, NumMicroBatch<4>>;
static_assert(P::devices_per_replica == 4 && P::deadlock_free && P::sequence_parallel);
static_assert(P::num_layers == Single::num_layers);
// the table tied across the pipeline: the Embedding on stage 0, the head on stage 1
static_assert(P::tie.any() && P::stage_of_part(P::layer_plans[P::tie.owner].part) == 0 &&
              P::stage_of_part(P::layer_plans[P::tie.user].part) == 1);

// What the command line asks for (the same on every rank).
struct job_options {
  int steps = 2000;
  std::string checkpoint = "checkpoints/llama";  // written every `save_every` steps and at the end
  int save_every = 1000;
  std::string resume;        // a checkpoint to continue from (its step counts toward `steps`)
  int stop_after = 0;        // end after this step without the evaluation (as a crash would); 0: never
  std::string export_dir = "checkpoints/llama-hf";  // the final model in the Hugging Face format
};

template <class Plan, class World>
int run(World& world, const job_options& o) {
  using M = float;
  const int steps = o.steps;
  const bool leader = world.rank() == 0;
  auto train = make_trainer<Plan, M>(world, AdamW{.lr = 2e-3, .weight_decay = 0.01});
  // Llama's recipe, scaled down: warm-up, cosine decay to a tenth, no decay on norms, clipping
  train.set_training_options({.schedule = {.kind = lr_schedule::decay::cosine, .warmup = 100, .total = steps,
                                           .final_ratio = 0.1},
                              .decay = decay_on::matrices,
                              .clip_norm = 1.0});
  const int dp = train.data_parallel(), replica = train.coord().data;
  const std::size_t per_replica = std::size_t(Plan::replica_batch);

  // The text, its BPE model and token files (built once, cached in token-cache/).
  const auto t_prep = std::chrono::steady_clock::now();
  const gpt_text::corpus text = examples::agreed_load(world, [] { return gpt_text::load(); });
  const gpt_tokens::tokens tok = gpt_tokens::agreed_prepare(world, text, Vocab);
  const double prep_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_prep).count();
  data::window_reader reader(tok.train, Seq, replica, dp, per_replica, 2026);

  int first_step = 0;
  if (!o.resume.empty()) {
    const checkpoint_info info = train.load_checkpoint(o.resume);
    if (info.step > steps)  // the same on every rank: the ranks agreed on the checkpoint
      throw agreed_error("checkpoint " + o.resume + " was written after step " + std::to_string(info.step) +
                         ", beyond this run's " + std::to_string(steps) + " steps: pass at least " +
                         std::to_string(info.step) + " steps");
    examples::agreed_load(world, [&] {  // the reading position: the same windows as the uninterrupted run
      reader.restore(info.user);
      return 0;
    });
    first_step = static_cast<int>(info.step);
    if (leader) std::printf("resumed from %s after step %d\n", o.resume.c_str(), first_step);
  }
  auto save = [&](int done) {
    train.save_checkpoint(o.checkpoint, reader.checkpoint_entries());
    if (leader) std::printf("checkpoint after step %d: %s\n", done, o.checkpoint.c_str());
  };
  if (leader)
    std::printf("strata Llama: %d blocks, D %d, %d heads over %d key/value heads, SwiGLU %d, context %d, "
                "vocabulary %d (SentencePiece BPE), tied embeddings; %d processes = %d stages x Split<%d> x DP %d%s; "
                "%lld parameters\n"
                "text: %zu collections of %s, %zu bytes training, %zu held out; %llu + %llu tokens "
                "(%.4f tokens/byte; model and token files %s, %.1f s)\n",
                Blocks, D, Heads, KVHeads, Hidden, Seq, Vocab, world.size(), Plan::stages, Plan::part_devices, dp,
                Plan::sequence_parallel ? " + sequence parallel" : "", Plan::model_parameters, text.files.size(),
                gpt_text::text_dir().c_str(), text.train.size(), text.validation.size(),
                (unsigned long long)tok.train.size(), (unsigned long long)tok.validation.size(),
                double(tok.train.size()) / double(text.train.size()),
                tok.model_note.reused && tok.train_note.reused ? "reused" : "built", prep_s);

  const double tokens_per_step = double(per_replica) * dp * Seq;
  auto t0 = std::chrono::steady_clock::now();
  double window_loss = 0;
  int window = 0;
  data::token_batch<M> b;
  for (int s = first_step; s < steps; ++s) {
    reader.next_into(b);
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
  const auto mine = data::evaluation_windows<M>(tok.validation, Seq, 256, replica, dp, per_replica);
  const step_result v =
      train.evaluate({.inputs = mine.batch.inputs, .labels = mine.batch.labels, .samples = mine.batch.samples},
                     mine.valid);
  // nats per token → bits per byte: × tokens per byte of the held-out text / ln 2
  const double tokens_per_byte = double(tok.validation.size()) / double(text.validation.size());
  const double bpb = v.loss * tokens_per_byte / std::log(2.0);

  // The trained model in plain float64 (llama/reference.hpp), on every rank: the first
  // held-out window's loss against the distributed evaluation of that window, then a sample.
  const auto params = train.gather_parameters();
  std::vector<std::string> names;
  for (const auto& lp : Plan::layer_plans) names.emplace_back(lp.desc.name);
  const llama_reference::config cfg{.vocab = Vocab, .d = D, .heads = Heads, .kv_heads = KVHeads, .hidden = Hidden,
                                    .norm_eps = 1e-5, .rope_base = 10000};
  const std::vector<std::uint32_t> first_ids = tok.validation.read(0, Seq + 1);
  const double ref = llama_reference::window_loss(cfg, params, names, first_ids.data(), Seq);
  data::token_batch<M> first;
  for (std::size_t i = 0; i < per_replica; ++i)
    for (int t = 0; t < Seq; ++t) {
      if (t == 0) ++first.samples;
      first.inputs.push_back(M(first_ids[std::size_t(t)]));
      first.labels.push_back(std::int32_t(first_ids[std::size_t(t) + 1]));
    }
  const step_result one = train.evaluate({.inputs = first.inputs, .labels = first.labels, .samples = first.samples}, 1);

  // The final model in the Hugging Face format (LlamaForCausalLM): transformers loads it.
  hf::export_folder(world, train, o.export_dir);
  if (leader) {
    std::printf("validation tokens: %lld\n", v.rows);
    std::printf("validation loss: %.4f nats/token, %.4f bits/byte (%.4f tokens/byte)\n", v.loss, bpb, tokens_per_byte);
    std::printf("float64 reference forward, first held-out window: %.6f nats/token (strata: %.6f)\n", ref, one.loss);
    std::printf("exported to %s (LlamaForCausalLM, safetensors)\n", o.export_dir.c_str());
    const std::string prompt = "The meaning of life is";
    llama_reference::model m(cfg, params, names);
    std::mt19937_64 g(7);
    std::vector<std::uint32_t> ids = tok.model.encode(prompt);
    std::vector<double> z;
    for (std::uint32_t id : ids) z = m.next(int(id));
    while (ids.size() < std::size_t(Seq)) {
      const double top = *std::max_element(z.begin(), z.end());
      std::vector<double> w(z.size());
      for (std::size_t i = 0; i < z.size(); ++i) w[i] = std::exp((z[i] - top) / 0.7);  // temperature 0.7
      const int next = std::discrete_distribution<int>(w.begin(), w.end())(g);
      ids.push_back(std::uint32_t(next));
      z = m.next(next);
    }
    std::printf("sample (prompt \"%s\", temperature 0.7, decoded by SentencePiece):\n%s\n", prompt.c_str(),
                tok.model.decode(ids).c_str());
  }
  return 0;
}

// `prog [steps] [--checkpoint DIR] [--save-every N] [--resume DIR] [--stop-after N] [--export DIR]`: every
// rank reads the same arguments, so a bad one stops every rank before any collective.
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
    else if (a == "--export") o.export_dir = value();
    else if (a == "--save-every") o.save_every = positive_int(a, value());
    else if (a == "--stop-after") o.stop_after = positive_int(a, value());
    else if (i == 1 && !a.starts_with("-")) o.steps = positive_int("steps", a);
    else throw agreed_error("unknown argument '" + a + "' (usage: llama_train [steps] [--checkpoint DIR] "
                            "[--save-every N] [--resume DIR] [--stop-after N] [--export DIR])");
  }
  if (world.size() == 1) return run<Single>(world, o);
  return run<P>(world, o);
}

}  // namespace llama_job
