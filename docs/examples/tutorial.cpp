// The first hour, on 4 processes: a small GPT of one's own, checked against one device,
// trained as tensor parallel x data parallel (TP2 x DP2), checkpointed, resumed as a
// two-stage pipeline of TP2 (PP2 x TP2), and the resumed run checked against the run that
// never stopped. docs/tutorial.md walks through it.
//   mpiexec -n 4 ./tutorial
// mpi-ranks: 4
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>

using namespace strata;

// 1. The model, written once: token + position embeddings, two pre-LN blocks, the head.
constexpr int Vocab = 64, Seq = 16, D = 32, Heads = 4;
using Attention = Residual<LayerNorm<D>, CausalSelfAttention<D, Heads, Seq>>;
using MLP = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;

// 2. Two plans of it. The strategies are types: a configuration that cannot work does not
//    compile, and the message names the rule and the numbers.
using TPxDP = Plan<Split<2, Embedding<Vocab, D>, PositionEmbedding<Seq, D>, Repeat<2, Attention, MLP>, LayerNorm<D>,
                         Linear<D, Vocab>>,
                   Input<Seq>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>, SequenceParallel, Zero<1>>;
using PPxTP = Plan<Pipeline<Split<2, Embedding<Vocab, D>, PositionEmbedding<Seq, D>, Attention, MLP>,
                            Split<2, Attention, MLP, LayerNorm<D>, Linear<D, Vocab>>>,
                   Input<Seq>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>, NumMicroBatch<2>, SequenceParallel>;
static_assert(TPxDP::devices_per_replica == 2 && PPxTP::devices_per_replica == 4 && PPxTP::deadlock_free);

int main(int argc, char** argv) {
  auto world = init<Host>(argc, argv);
  const bool leader = world.rank() == 0;
  const AdamW opt{.lr = 3e-3, .weight_decay = 0.01};
  const training_options recipe{.schedule = {.kind = lr_schedule::decay::cosine, .warmup = 5, .total = 40},
                                .decay = decay_on::matrices, .clip_norm = 1.0};

  // 3. Before training: the plan against the same layers on one device. The verdict is
  //    the plan's arithmetic in float64 (layouts, collectives and schedule, without float32
  //    rounding); the float32 run the plan trains in is reported beside it.
  const auto check = verify::against_one_device<TPxDP>(world, opt, 5, verify::random_data<TPxDP>(),
                                                       verify::default_tolerance<float>(), 0x5eed, recipe);
  if (leader) std::printf("%s", check.text().c_str());
  if (!check.ok()) return 1;

  // 4. Train. Every rank makes the same global batch — here counting sequences from a
  //    random start (k, k+1, ...; the next token is the label) — and share() hands each
  //    data-parallel replica its part of it.
  const std::size_t G = 8;  // sequences per step, the same in both plans on 4 processes
  auto global_batch = [&](int step, std::vector<float>& x, std::vector<std::int32_t>& y) {
    x.resize(G * Seq), y.resize(G * Seq);
    verify::random_data<TPxDP>(7)(step, std::span<float>(x), std::span<std::int32_t>(y));
    for (std::size_t i = 0; i < x.size(); ++i) {
      const std::size_t start = static_cast<std::size_t>(x[i - i % Seq]), t = i % Seq;
      x[i] = static_cast<float>((start + t) % Vocab);
      y[i] = static_cast<std::int32_t>((start + t + 1) % Vocab);
    }
  };
  std::vector<float> x;
  std::vector<std::int32_t> y;
  auto train = [&](auto& t, int from, int to) {
    double loss = 0;
    for (int s = from; s < to; ++s) {
      global_batch(s, x, y);
      loss = t.step(t.share({.inputs = x, .labels = y, .samples = G})).loss;
    }
    return loss;
  };
  const std::string dir = "tutorial_checkpoint";
  auto a = make_trainer<TPxDP>(world, opt);
  a.set_training_options(recipe);
  const double first = train(a, 0, 1);
  train(a, 1, 20);
  // 5. Checkpoint: one safetensors file per rank and index.json, in the model's own names,
  //    whatever the plan; the data position goes with it.
  a.save_checkpoint(dir, {{"data.position", "20"}});
  const double straight = train(a, 20, 40);

  // 6. Resume in another plan: PP2 x TP2 reads TP2 x DP2's pieces and reshards them.
  auto b = make_trainer<PPxTP>(world, opt);
  b.set_training_options(recipe);
  const checkpoint_info info = b.load_checkpoint_from<TPxDP>(dir);
  const double resumed = train(b, std::stoi(info.user.at("data.position")), 40);

  // 7. The resumed run continues the same trajectory (float32: within rounding).
  const auto pa = a.gather_parameters(), pb = b.gather_parameters();
  double num = 0, den = 0;
  for (std::size_t i = 0; i < pa.size(); ++i)
    for (std::size_t k = 0; k < pa[i].size(); ++k)
      for (std::size_t j = 0; j < pa[i][k].size(); ++j) {
        num += (pa[i][k][j] - pb[i][k][j]) * (pa[i][k][j] - pb[i][k][j]);
        den += pa[i][k][j] * pa[i][k][j];
      }
  const double diff = std::sqrt(num / den);
  if (leader) {
    std::printf("loss %.4f -> %.4f (TP2 x DP2); resumed after step %lld as PP2 x TP2: %.4f\n", first, straight,
                info.step, resumed);
    std::printf("parameters after step 40, resumed against uninterrupted: relative %.2e\n", diff);
    std::filesystem::remove_all(dir);
  }
  return straight < first && diff < 1e-4 && std::abs(resumed - straight) < 1e-3 * straight ? 0 : 1;
}
