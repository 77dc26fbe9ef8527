// A small GPT as the trainer runs it — token and position embeddings, pre-LN residual
// blocks with causal attention and an MLP, a final LayerNorm, the per-token loss —
// checked end to end in float64: the gradient one step applies (SGD, lr 1: p' = p − g)
// against central finite differences of the evaluated loss, on a sample of elements of
// every tensor; causality (a later token cannot change an earlier token's loss); and
// Repeat/Residual expanding into the layer list written by hand.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

#include "step_gradient.hpp"
#include "gpt/reference.hpp"  // the GPT job's plain float64 GPT (examples/gpt/)
#include "llama/reference.hpp"  // the main job's plain float64 Llama (examples/llama/)

using namespace strata;

namespace {

constexpr int V = 11, S = 4, D = 8, H = 2;
using Attn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>;
using MLP = Residual<LayerNorm<D>, Linear<D, 2 * D>, GeLU, Linear<2 * D, D>>;
using GPT = Plan<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, Repeat<2, Attn, MLP>, LayerNorm<D>, Linear<D, V>>,
                 Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<3>, Element<double>>;

using layers::ResidualBegin, layers::ResidualEnd;
using Written = type_list<Embedding<V, D>, PositionEmbedding<S, D>,                                       //
                          ResidualBegin, LayerNorm<D>, CausalSelfAttention<D, H, S>, ResidualEnd,         //
                          ResidualBegin, LayerNorm<D>, Linear<D, 2 * D>, GeLU, Linear<2 * D, D>, ResidualEnd,  //
                          ResidualBegin, LayerNorm<D>, CausalSelfAttention<D, H, S>, ResidualEnd,         //
                          ResidualBegin, LayerNorm<D>, Linear<D, 2 * D>, GeLU, Linear<2 * D, D>, ResidualEnd,  //
                          LayerNorm<D>, Linear<D, V>, SoftmaxCrossEntropy>;
static_assert(std::is_same_v<GPT::layers, Written>);
static_assert(GPT::valid && GPT::labels_per_sample == S && GPT::classes == V && GPT::vocabulary == V);

struct batch {
  std::vector<double> x;
  std::vector<std::int32_t> y;
  explicit batch(std::uint64_t seed) : x(3 * S), y(3 * S) {
    std::mt19937_64 g(seed);
    for (auto& v : x) v = double(g() % V);
    for (auto& v : y) v = std::int32_t(g() % V);
  }
  batch_view<double> view() const { return {.inputs = x, .labels = y, .samples = 3}; }
};

}  // namespace

// One SGD step (lr 1: p' = p − g) from random parameters, larger than the initialisation so
// that every path matters, against central finite differences of the evaluated loss.
template <class P>
void check_gradients(const batch_view<double>& b, std::size_t samples, std::uint64_t seed, const char* what) {
  auto w = local_world<Host>();
  auto t = make_trainer<P>(w, SGD{.lr = 1.0}, 5);
  auto p = t.gather_parameters();
  std::mt19937_64 g(seed);
  std::normal_distribution<double> nd(0.0, 0.4);
  for (auto& layer : p)
    for (auto& tensor : layer)
      for (auto& v : tensor) v += nd(g);
  t.set_parameters(p);
  auto loss = [&] { return t.evaluate(b, samples).loss; };
  const double l0 = loss();
  const step_result r = t.step(b);
  CHECK(std::abs(r.loss - l0) < 1e-13);  // the step's loss is the evaluated one
  const auto after = t.gather_parameters();
  const auto [checked, worst] = check_step_gradient(
      p, after,
      [&](const auto& q) {
        t.set_parameters(q);
        return loss();
      },
      [](std::size_t i) { return P::layer_plans[i].desc.name; }, g, 6, 1e-5, 1e-5);
  MESSAGE(std::string(what) << " vs finite differences: " << checked << " elements, worst relative error " << worst);
}

TEST_CASE("GPT gradients equal finite differences of the loss") {
  const batch b(3);
  check_gradients<GPT>(b.view(), 3, 9, "GPT gradient");
}

// Nested residuals, one with a shortcut: each skip's gradient lives in the work slot of its
// nesting depth while the backward runs (plan/lower/parts.hpp), the shortcut's branch gradient
// in the slot its ResidualEnd left; checked as the GPT above, with two micro-batches per step.
TEST_CASE("nested residuals and a shortcut: gradients equal finite differences") {
  using Inner = Residual<Linear<D, D>, GeLU>;
  using Outer = Residual<LayerNorm<D>, Inner, Linear<D, D>>;
  using Projected = Residual<Shortcut<Linear<D, D>>, LayerNorm<D>, Residual<Linear<D, D>, GeLU>, Linear<D, D>>;
  using Nested = Plan<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, Outer, Projected, LayerNorm<D>, Linear<D, V>>,
                      Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<3>, NumMicroBatch<2>, Element<double>>;
  static_assert(Nested::valid);
  // two depths of one [3 S, D] slot each, in the work region; nothing of them in the stash
  constexpr auto& work = Nested::lowering::tables.work[0];
  static_assert(work.skip_slots == 2 && work.skip_slot == 3 * S * D);
  const batch b0(5), b1(6);
  std::vector<double> x = b0.x;
  std::vector<std::int32_t> y = b0.y;
  x.insert(x.end(), b1.x.begin(), b1.x.end());
  y.insert(y.end(), b1.y.begin(), b1.y.end());
  check_gradients<Nested>({.inputs = x, .labels = y, .samples = 6}, 6, 17, "nested residuals");
}

// The forward pass against a naive float64 GPT written without strata's kernels (one
// token at a time with a key/value cache): every sequence's mean loss.
TEST_CASE("GPT forward equals a naive float64 reference") {
  auto w = local_world<Host>();
  auto t = make_trainer<GPT>(w, SGD{}, 21);
  auto p = t.gather_parameters();
  std::mt19937_64 g(4);
  std::normal_distribution<double> nd(0.0, 0.5);
  for (auto& layer : p)
    for (auto& tensor : layer)
      for (auto& v : tensor) v += nd(g);
  t.set_parameters(p);
  const gpt_reference::config cfg{V, S, D, H, 2, 2 * D};
  for (int trial = 0; trial < 4; ++trial) {
    std::vector<unsigned char> tokens(S + 1);
    for (auto& b : tokens) b = static_cast<unsigned char>(g() % V);
    std::vector<double> x(3 * S, 0.0);
    std::vector<std::int32_t> y(3 * S, 0);
    for (int k = 0; k < S; ++k) x[std::size_t(k)] = tokens[std::size_t(k)], y[std::size_t(k)] = tokens[std::size_t(k) + 1];
    const double strata_loss = t.evaluate({.inputs = x, .labels = y, .samples = 3}, 1).loss;
    const double reference = gpt_reference::window_loss(cfg, p, tokens.data());
    CHECK(std::abs(strata_loss - reference) < 1e-12 * std::abs(reference));
  }
}

// A Llama-style decoder (RMSNorm, rotary grouped-query attention without biases, SwiGLU, a
// tied head) against the main
// job's float64 reference (examples/llama/reference.hpp), every sequence's mean loss.
TEST_CASE("Llama forward equals the naive float64 reference") {
  constexpr int LV = 37, LS = 7, LD = 16, LH = 4;
  using LAttn = Residual<RMSNorm<LD>, LlamaAttention<LD, LH, 2, LS>>;  // 4 query heads over 2 key/value heads
  using LMlp = Residual<RMSNorm<LD>, SwiGLU<LD, 24>>;
  using Llama = Plan<Replicate<1, Embedding<LV, LD>, Repeat<2, LAttn, LMlp>, RMSNorm<LD>, TiedHead<LV, LD>>, Input<LS>,
                     Loss<SoftmaxCrossEntropy>, MicroBatch<2>>;
  auto w = local_world<Host>();
  auto t = make_trainer<Llama, double>(w, SGD{}, 23);
  auto p = t.gather_parameters();
  std::mt19937_64 g(5);
  std::normal_distribution<double> nd(0.0, 0.5);
  for (auto& layer : p)
    for (auto& tensor : layer)
      for (auto& v : tensor) v += nd(g);
  p[Llama::tie.user][0] = p[Llama::tie.owner][0];  // one table
  t.set_parameters(p);
  std::vector<std::string> names;
  for (const auto& lp : Llama::layer_plans) names.emplace_back(lp.desc.name);
  const llama_reference::config cfg{.vocab = LV, .d = LD, .heads = LH, .kv_heads = 2, .hidden = 24, .norm_eps = 1e-5,
                                    .rope_base = 10000};
  for (int trial = 0; trial < 3; ++trial) {
    std::vector<int> tokens(LS + 1);
    for (auto& b : tokens) b = static_cast<int>(g() % LV);
    std::vector<double> x(2 * LS, 0.0);
    std::vector<std::int32_t> y(2 * LS, 0);
    for (int k = 0; k < LS; ++k) x[std::size_t(k)] = tokens[std::size_t(k)], y[std::size_t(k)] = tokens[std::size_t(k) + 1];
    const double strata_loss = t.evaluate({.inputs = x, .labels = y, .samples = 2}, 1).loss;
    const double reference = llama_reference::window_loss(cfg, p, names, tokens.data(), LS);
    CHECK(std::abs(strata_loss - reference) < 1e-12 * std::abs(reference));
  }
}

TEST_CASE("causal attention: no token's loss depends on a later token") {
  // inputs a, b differ only in the last token. With causal attention only the last
  // token's loss can change, so loss(a) − loss(b) does not depend on the earlier labels;
  // without the mask it does.
  auto check = [](auto trainer, bool causal) {
    const std::vector<double> a = {1, 2, 3, 4}, b = {1, 2, 3, 9};
    const std::vector<std::int32_t> y = {5, 6, 7, 8}, y2 = {0, 10, 3, 8};  // same last label
    auto loss = [&](const std::vector<double>& x, const std::vector<std::int32_t>& l) {
      return trainer.evaluate({.inputs = x, .labels = l, .samples = 1}, 1).loss;
    };
    const double d1 = loss(a, y) - loss(b, y), d2 = loss(a, y2) - loss(b, y2);
    CHECK(std::abs(d1) > 1e-6);  // the last token's own loss changed
    if (causal) CHECK(std::abs(d1 - d2) < 1e-14);
    else CHECK(std::abs(d1 - d2) > 1e-6);
  };
  auto w = local_world<Host>();
  using Causal = Plan<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, Attn, LayerNorm<D>, Linear<D, V>>,
                      Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<1>, Element<double>>;
  using Full = Plan<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>,
                              Residual<LayerNorm<D>, MultiHeadAttention<D, H, S>>, LayerNorm<D>, Linear<D, V>>,
                    Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<1>, Element<double>>;
  check(make_trainer<Causal>(w, SGD{}, 5), true);
  check(make_trainer<Full>(w, SGD{}, 5), false);
}

// EPL's check_gradients: recomputing a region's forward in the backward gives the same
// gradients, bit for bit (the same kernels on the same inputs), for every way to choose
// the regions; and the stash it saves is real.
namespace {
template <class... Extra>
using gpt_with = Plan<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, Repeat<2, Attn, MLP>, LayerNorm<D>, Linear<D, V>>,
                      Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<3>, Element<double>, Extra...>;
using Auto = gpt_with<GradientCheckpoint<checkpoint_mode::automatic>>;
using PerTaskGraph = gpt_with<GradientCheckpoint<checkpoint_mode::end_taskgraph>>;
using Written2 = Plan<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, Checkpoint<Attn>, MLP, Checkpoint<Attn, MLP>,
                                LayerNorm<D>, Linear<D, V>>,
                      Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<3>, Element<double>>;
static_assert(GPT::recompute_regions == 0 && Auto::recompute_regions == 4 && PerTaskGraph::recompute_regions == 1 &&
              Written2::recompute_regions == 2);
// every region's activations live in the stage's one recompute buffer: less kept per micro-batch
static_assert(Auto::stash_bytes(0) < GPT::stash_bytes(0) && PerTaskGraph::stash_bytes(0) < Auto::stash_bytes(0));
static_assert(Auto::activation_arena_bytes(0) < GPT::activation_arena_bytes(0));

template <class P>
std::vector<std::vector<std::vector<double>>> train_three_steps() {
  auto w = local_world<Host>();
  auto t = make_trainer<P>(w, Adam{.lr = 1e-2}, 11);
  for (int s = 0; s < 3; ++s) {
    const batch b(100 + std::uint64_t(s));
    t.step(b.view());
  }
  return t.gather_parameters();
}
}  // namespace

TEST_CASE("activation recomputation: bit-identical training, smaller stash") {
  const auto ref = train_three_steps<GPT>();
  CHECK(train_three_steps<Auto>() == ref);
  CHECK(train_three_steps<PerTaskGraph>() == ref);
  CHECK(train_three_steps<Written2>() == ref);
  MESSAGE("stash per micro-batch: " << GPT::stash_bytes(0) << " B kept, " << Auto::stash_bytes(0)
                                    << " B recomputing every block, " << PerTaskGraph::stash_bytes(0)
                                    << " B recomputing the TaskGraph");
}

// Dropout on the residual branches (layers/dropout.hpp): the mask is a function of global
// coordinates, so training drops, evaluation does not, and a recomputed forward draws the
// forward's mask again (bit-identical training).
namespace {
using DropAttn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>, Dropout<10>>;
// on the hidden activations too: the Linear after it keeps the dropped values, so its
// gradient needs a recomputed forward to draw the same mask
using DropMLP = Residual<LayerNorm<D>, Linear<D, 2 * D>, GeLU, Dropout<10>, Linear<2 * D, D>, Dropout<10>>;
template <class... Extra>
using drop_gpt = Plan<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, Repeat<2, DropAttn, DropMLP>, LayerNorm<D>,
                                Linear<D, V>>,
                      Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<3>, Element<double>, Extra...>;
using DropGPT = drop_gpt<>;
using DropAuto = drop_gpt<GradientCheckpoint<checkpoint_mode::automatic>>;
static_assert(DropGPT::num_layers == GPT::num_layers + 6 && DropAuto::recompute_regions == 4);
// the backward recomputes the mask: Dropout keeps nothing (the Linear after the hidden one
// keeps its input, as it keeps GeLU's output without it)
static_assert(DropGPT::stash_bytes(0) == GPT::stash_bytes(0));
}  // namespace

TEST_CASE("Dropout in a GPT: training drops, evaluation does not, a recomputed forward draws the same mask") {
  auto w = local_world<Host>();
  auto plain = make_trainer<GPT>(w, SGD{.lr = 0.1}, 5);
  auto drop = make_trainer<DropGPT>(w, SGD{.lr = 0.1}, 5);
  // the same parameters: Dropout has none, so the plain GPT's with an empty entry per Dropout
  const auto p = plain.gather_parameters();
  std::vector<std::vector<std::vector<double>>> q;
  std::size_t k = 0;
  for (const layer_plan& lp : DropGPT::layer_plans)
    q.push_back(lp.desc.name == "Dropout" ? std::vector<std::vector<double>>{} : p[k++]);
  REQUIRE(k == p.size());
  drop.set_parameters(q);
  const batch b(3);
  const double eval_plain = plain.evaluate(b.view(), 3).loss;
  const double eval_drop = drop.evaluate(b.view(), 3).loss;
  CHECK(drop.evaluate(b.view(), 3).loss == eval_drop);  // deterministic
  CHECK(eval_drop == eval_plain);                       // and drop-free: the plain model's loss, bit for bit
  const double step_plain = plain.step(b.view()).loss, step_drop = drop.step(b.view()).loss;
  CHECK(std::abs(step_plain - eval_plain) < 1e-13);  // without dropout the step's loss is the evaluated one
  CHECK(std::abs(step_drop - step_plain) > 1e-3);    // with it, the training forward drops
  MESSAGE("loss of one batch: evaluated " << eval_drop << ", training with Dropout<10> " << step_drop);
  CHECK(train_three_steps<DropAuto>() == train_three_steps<DropGPT>());
}

// Attention dropout (CausalSelfAttention's AttnDropout): the same parameters as the GPT
// without it; evaluation is that GPT's, bit for bit; a training step drops; a recomputed
// attention draws its forward's mask again (bit-identical training).
namespace {
using AttnDrop = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S, 0, 10>>;
template <class... Extra>
using attn_drop_gpt = Plan<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, Repeat<2, AttnDrop, MLP>, LayerNorm<D>,
                                     Linear<D, V>>,
                           Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<3>, Element<double>, Extra...>;
// nothing kept for the mask: the stash of the GPT without it
static_assert(attn_drop_gpt<>::stash_bytes(0) == GPT::stash_bytes(0));
}  // namespace

TEST_CASE("attention dropout in a GPT: training drops, evaluation does not, a recompute draws the same mask") {
  auto w = local_world<Host>();
  auto plain = make_trainer<GPT>(w, SGD{.lr = 0.1}, 5);
  auto drop = make_trainer<attn_drop_gpt<>>(w, SGD{.lr = 0.1}, 5);
  drop.set_parameters(plain.gather_parameters());
  const batch b(3);
  const double eval_plain = plain.evaluate(b.view(), 3).loss, eval_drop = drop.evaluate(b.view(), 3).loss;
  CHECK(eval_drop == eval_plain);  // drop-free: the plain model's loss, bit for bit
  const double step_plain = plain.step(b.view()).loss, step_drop = drop.step(b.view()).loss;
  CHECK(std::abs(step_plain - eval_plain) < 1e-13);
  CHECK(std::abs(step_drop - step_plain) > 1e-3);  // the training forward drops probabilities
  MESSAGE("loss of one batch: evaluated " << eval_drop << ", training with attention dropout 10% " << step_drop);
  CHECK(train_three_steps<attn_drop_gpt<GradientCheckpoint<checkpoint_mode::automatic>>>() ==
        train_three_steps<attn_drop_gpt<>>());
}
