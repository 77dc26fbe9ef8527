// BERT pre-training (masked language model), as EPL's chapter 8 trains it: two pipeline
// stages (1F1B) and data parallelism over the remaining processes (2 processes: PP2; 4:
// PP2 x DP2; 1: one device). Byte-level tokens of the fortune collections plus [CLS],
// [SEP], [MASK]; each sample is a pair "[CLS] a… [SEP] b… [SEP]" (a: the start of a fortune,
// b: the text after it), 15% of the text positions masked (80% [MASK], 10% a random
// byte, 10% kept) and only those labelled; the loss is the mean over the masked positions
// of the whole global batch.
//   mpiexec -n 4 ./bert_train [steps]
// First the plan is checked against one device (float64, two steps); then it trains
// `steps` steps (default 1000) and reports the masked-token loss and accuracy on held-out
// fortunes, beside the unigram baseline (predicting a masked byte without context).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>

#include "agreed_load.hpp"
#include "arguments.hpp"
#include "gpt/text_data.hpp"

namespace {

using namespace strata;

constexpr int CLS = 256, SEP = 257, MASK = 258, Vocab = 260;  // bytes, then the special tokens (259 unused)
constexpr int Seq = 128, D = 128, Heads = 4, Blocks = 4;
// post-LN blocks (the residual sum, then the norm), bidirectional attention
using Block = Repeat<1, Residual<MultiHeadAttention<D, Heads, Seq>>, LayerNorm<D>,
                     Residual<Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>, LayerNorm<D>>;
using Embeddings = Repeat<1, SegmentEmbedding<Vocab, D, 2, SEP>, PositionEmbedding<Seq, D>, LayerNorm<D>>;
// the decoder reads the word table and adds a bias of its own
using MlmHead = Repeat<1, Linear<D, D>, GeLU, LayerNorm<D>, TiedHead<Vocab, D, true>>;
template <class T>
using Pipelined = Plan<Pipeline<Replicate<1, Embeddings, Repeat<Blocks / 2, Block>>,
                                Replicate<1, Repeat<Blocks / 2, Block>, MlmHead>>,
                       Input<Seq>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>, NumMicroBatch<4>,
                       Schedule<PreferBackward>, Element<T>>;
template <class T>
using Single = Plan<Replicate<1, Embeddings, Repeat<Blocks, Block>, MlmHead>, Input<Seq>, Loss<SoftmaxCrossEntropy>,
                    MicroBatch<4>, NumMicroBatch<4>, Element<T>>;

// Fortune pairs from one text: where each entry starts, so that a starts at an entry.
struct pairs {
  const std::string& text;
  std::vector<std::size_t> starts;
  pairs(const std::string& t, const std::vector<std::string>& entries) : text(t) {
    std::size_t at = 0;
    for (const auto& e : entries) {
      if (at + Seq < text.size()) starts.push_back(at);
      at += e.size();
    }
  }
  // Sample `index` of a batch drawn with generator g: ids and labels (ignore_label where
  // nothing is masked).
  template <class M>
  void sample(std::mt19937_64& g, std::span<M> ids, std::span<std::int32_t> labels) const {
    std::size_t from = starts[g() % starts.size()];  // Seq − 3 bytes from here exist
    const std::size_t a = 8 + g() % (Seq / 2 - 10);   // a's length; b takes the rest
    for (std::size_t t = 0; t < std::size_t(Seq); ++t) {
      const bool special = t == 0 || t == a + 1 || t + 1 == std::size_t(Seq);
      const int token = t == 0 ? CLS : special ? SEP : static_cast<unsigned char>(text[from++]);
      ids[t] = M(token);
      labels[t] = ignore_label;
      if (!special && g() % 100 < 15) {
        labels[t] = token;
        const auto r = g() % 10;
        ids[t] = M(r < 8 ? MASK : r < 9 ? int(g() % 256) : token);
      }
    }
  }
  // The global batch of `samples` pairs for step `step` (the same on every rank).
  template <class M>
  void batch(std::uint64_t seed, std::size_t samples, std::vector<M>& ids, std::vector<std::int32_t>& labels) const {
    std::mt19937_64 g(seed);
    ids.resize(samples * Seq);
    labels.resize(samples * Seq);
    for (std::size_t s = 0; s < samples; ++s)
      sample(g, std::span<M>(ids).subspan(s * Seq, Seq), std::span<std::int32_t>(labels).subspan(s * Seq, Seq));
  }
};

template <class P, class World>
int run(World& world, int steps) {
  using M = float;
  const bool leader = world.rank() == 0;
  const gpt_text::corpus text = examples::agreed_load(world, [] { return gpt_text::load_for(Seq); });
  const pairs train_pairs(text.train, text.train_entries), held_out(text.validation, text.validation_entries);
  auto train = make_trainer<P, M>(world, AdamW{.lr = 1e-3, .weight_decay = 0.01});
  train.set_training_options({.schedule = {.kind = lr_schedule::decay::cosine, .warmup = 40, .total = steps,
                                           .final_ratio = 0.1},
                              .decay = decay_on::matrices,
                              .clip_norm = 1.0});
  const int dp = train.data_parallel();
  const std::size_t global = std::size_t(P::replica_batch) * std::size_t(dp);
  if (leader)
    std::printf("strata BERT (masked LM): %d post-LN blocks, D %d, %d heads, %d positions, vocabulary %d (bytes + "
                "[CLS] [SEP] [MASK]); %d processes = %d pipeline stages x %d replicas; %zu pairs per step\n",
                Blocks, D, Heads, Seq, Vocab, world.size(), P::stages, dp, global);
  std::vector<M> ids;
  std::vector<std::int32_t> labels;
  const auto t0 = std::chrono::steady_clock::now();
  double window_loss = 0, window_masked = 0;
  for (int s = 0; s < steps; ++s) {
    train_pairs.batch(2026 + std::uint64_t(s), global, ids, labels);
    const step_result r = train.step(train.share({.inputs = ids, .labels = labels, .samples = global}));
    window_loss += r.loss * double(r.rows), window_masked += double(r.rows);
    if (leader && ((s + 1) % 50 == 0 || s + 1 == steps)) {
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("step %4d/%d  masked-token loss %.4f nats  %.0f tokens/s\n", s + 1, steps,
                  window_loss / window_masked, double(global) * Seq * (s + 1) / secs);
      std::fflush(stdout);
      window_loss = window_masked = 0;
    }
  }
  // held-out pairs, masked once with a fixed seed: 8 batches of the step's size
  double loss = 0, masked = 0, correct = 0;
  for (int b = 0; b < 8; ++b) {
    held_out.batch(7 + std::uint64_t(b), global, ids, labels);
    const step_result r =
        train.evaluate(train.share({.inputs = ids, .labels = labels, .samples = global}), std::size_t(P::replica_batch));
    loss += r.loss * double(r.rows), masked += double(r.rows), correct += double(r.correct);
  }
  if (leader)
    std::printf("held-out masked tokens: %.0f; loss %.4f nats/token, accuracy %.1f%% (unigram baseline: %.4f nats)\n",
                masked, loss / masked, 100.0 * correct / masked, gpt_text::unigram_entropy(text.validation));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  auto world = strata::init<strata::Host>(argc, argv);
  try {
    int steps = 1000;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (i == 1) steps = examples::positive_int("steps", a);
      else throw agreed_error("unknown argument '" + a + "' (usage: bert_train [steps])");
    }
    if (world.size() == 1) return run<Single<float>>(world, steps);
    if (world.size() % 2 != 0)
      throw agreed_error("bert_train runs on 1 process or an even number (2 pipeline stages x replicas), not " +
                         std::to_string(world.size()));
    {  // the pipelined plan against one device, in float64, on the fortunes' masked pairs
      using Check = Pipelined<double>;
      const gpt_text::corpus text = examples::agreed_load(world, [] { return gpt_text::load_for(Seq); });
      const pairs p(text.train, text.train_entries);
      auto data = [&](int step, std::span<double> x, std::span<std::int32_t> y) {
        std::mt19937_64 g(std::uint64_t(step) + 1);
        for (std::size_t s = 0; s < x.size() / Seq; ++s) p.sample(g, x.subspan(s * Seq, Seq), y.subspan(s * Seq, Seq));
      };
      const auto r = verify::against_one_device<Check>(world, AdamW{.lr = 1e-3, .weight_decay = 0.01}, 2, data);
      if (world.rank() == 0) std::printf("%s", r.text().c_str());
      if (!r.ok()) return 1;
    }
    return run<Pipelined<float>>(world, steps);
  } catch (const std::exception& e) {
    return world.fail(e);
  }
}
