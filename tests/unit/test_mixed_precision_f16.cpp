// f16 mixed precision (AMP O1) on the host backend: make_trainer<P, f16> (f16
// activations and compute copies of the parameters, FP32 master weights, gradients,
// optimizer state and statistics) against the float64 trainer, for an MLP and a tiny
// GPT, next to the same runs in bf16. The kernels' f16 forms are checked one by one in
// the kernel suite (tests/kernels), the type's rounding in test_f16.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

using namespace strata;

namespace {

// The MLP of test_mixed_precision.cpp (GeLU: a flipped ReLU gate moves whole rows).
using Mlp = Plan<Replicate<1, Linear<16, 32>, GeLU, LayerNorm<32>, Linear<32, 16>, GeLU, Linear<16, 4>>,
                 Loss<SoftmaxCrossEntropy>, MicroBatch<8>, NumMicroBatch<2>>;
// A tiny GPT: token and position embeddings, two pre-LN blocks of causal attention and
// a GeLU MLP, a final LayerNorm, the per-token loss.
constexpr int V = 48, S = 8, D = 16, H = 2;
using Attn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>;
using Ffn = Residual<LayerNorm<D>, Linear<D, 2 * D>, GeLU, Linear<2 * D, D>>;
using Gpt = Plan<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, Repeat<2, Attn, Ffn>, LayerNorm<D>, Linear<D, V>>,
                 Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>, NumMicroBatch<2>>;

struct run_result {
  std::vector<double> losses;
  std::vector<std::vector<std::vector<double>>> params, initial;
  double eval = 0;
};

// `steps` steps on the same batches for every precision (drawn as floats, given in
// master_t<T>); vocab > 0 draws token ids below it.
template <class P, class T>
run_result train(optimizer opt, int steps, int vocab) {
  auto w = local_world<Host>();
  auto t = make_trainer<P, T>(w, opt, 11);
  std::mt19937_64 g(9);
  std::normal_distribution<float> nd;
  constexpr std::size_t in = P::input_shape.numel();
  constexpr std::size_t n = std::size_t(P::micro_batch) * P::num_micro_batch;
  const auto& ll = P::layer_plans[std::size_t(P::num_layers - 1)];
  const std::size_t per = std::size_t(ll.in.numel() / ll.in.last());
  std::vector<master_t<T>> x(n * in);
  std::vector<std::int32_t> y(n * per);
  run_result res;
  res.initial = t.gather_parameters();
  for (int s = 0; s < steps; ++s) {
    for (auto& v : x) v = master_t<T>(vocab ? float(g() % std::uint64_t(vocab)) : nd(g));
    for (auto& v : y) v = std::int32_t(g() % std::uint64_t(ll.in.last()));
    res.losses.push_back(t.step({.inputs = x, .labels = y, .samples = n}).loss);
  }
  res.eval = t.evaluate({.inputs = x, .labels = y, .samples = n}, n - 1).loss;
  res.params = t.gather_parameters();
  return res;
}

struct deviation {
  double loss = 0, param = 0;  // worst relative loss difference, worst per-tensor relative L2
};
deviation compare(const run_result& got, const run_result& ref) {
  deviation d;
  for (std::size_t s = 0; s < ref.losses.size(); ++s)
    d.loss = std::max(d.loss, std::abs(got.losses[s] - ref.losses[s]) / ref.losses[s]);
  for (std::size_t i = 0; i < ref.params.size(); ++i)
    for (std::size_t k = 0; k < ref.params[i].size(); ++k) {
      double num = 0, den = 0;
      for (std::size_t e = 0; e < ref.params[i][k].size(); ++e) {
        const double a = got.params[i][k][e], b = ref.params[i][k][e];
        num += (a - b) * (a - b);
        den += b * b;
      }
      d.param = std::max(d.param, std::sqrt(num / std::max(den, 1e-300)));
    }
  return d;
}

// f16 within `tol` of float64 (losses and parameters), and closer than bf16: three
// more significant bits show once the 16-bit rounding is the only difference.
template <class P>
void check_against_float64(const char* what, optimizer opt, int steps, int vocab, double tol) {
  const run_result ref = train<P, double>(opt, steps, vocab);
  const run_result half = train<P, f16>(opt, steps, vocab);
  const run_result brain = train<P, bf16>(opt, steps, vocab);
  const deviation h = compare(half, ref), b = compare(brain, ref);
  MESSAGE(std::string(what) << ", " << steps << " steps vs float64: f16 worst loss rel diff " << h.loss
               << ", worst parameter rel L2 " << h.param << "; bf16 " << b.loss << ", " << b.param);
  CHECK(h.loss < tol);
  CHECK(h.param < tol);
  CHECK(h.loss > 0.0);  // the f16 run really rounded somewhere
  CHECK(h.loss < b.loss);
  CHECK(h.param < b.param);
  CHECK(half.eval == doctest::Approx(ref.eval).epsilon(tol));
}

}  // namespace

TEST_CASE("make_trainer<P, f16> trains an MLP like float64 within f16 accuracy") {
  check_against_float64<Mlp>("MLP", Adam{.lr = 1e-2}, 12, 0, 1e-2);
}

// SGD: the key bias's gradient is zero up to rounding (a constant added to a row of
// scores), which Adam would scale up to lr-sized steps of noise in any precision.
TEST_CASE("make_trainer<P, f16> trains a tiny GPT like float64 within f16 accuracy") {
  check_against_float64<Gpt>("GPT", SGD{.lr = 0.3}, 8, V, 1e-2);
}

TEST_CASE("f16 training keeps FP32 master weights: updates below an f16 ulp are not lost") {
  // SGD with a tiny step: most updates are below half an f16 ulp of their weight
  // (2^-12 relative), so f16 weights would not move; the FP32 masters do (up to their
  // own rounding: an update ~1e-5 of a weight ~0.1 keeps ~2 decimal digits in float).
  const SGD sgd{.lr = 1e-4};
  const run_result ref = train<Mlp, double>(sgd, 3, 0);
  const run_result half = train<Mlp, f16>(sgd, 3, 0);
  std::size_t total = 0, sub_ulp = 0, moved = 0;
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.params.size(); ++i)
    for (std::size_t k = 0; k < ref.params[i].size(); ++k)
      for (std::size_t e = 0; e < ref.params[i][k].size(); ++e) {
        const double w0 = ref.initial[i][k][e], d_ref = ref.params[i][k][e] - w0;
        const double d_half = half.params[i][k][e] - half.initial[i][k][e];
        if (w0 == 0.0 || d_ref == 0.0) continue;
        ++total;
        sub_ulp += std::abs(d_ref) < std::ldexp(std::abs(w0), -12) ? 1 : 0;
        moved += d_half != 0.0 ? 1 : 0;
        num += (d_half - d_ref) * (d_half - d_ref);
        den += d_ref * d_ref;
      }
  MESSAGE(total << " weights: " << sub_ulp << " updates below half an f16 ulp; " << moved
                << " moved in the f16 run; update rel L2 diff " << std::sqrt(num / den));
  REQUIRE(total > 500);
  CHECK(sub_ulp > total * 9 / 10);
  CHECK(moved > total * 9 / 10);
  CHECK(std::sqrt(num / den) < 1e-2);
}
