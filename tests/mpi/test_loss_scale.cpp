// Loss scaling (LossScale<FixedScale<S>> / LossScale<DynamicScale<L, N>>) against closed
// forms, on 1, 2 and 4 ranks:
//  * a power-of-two scale is exact: float64 training with a fixed scale of 1024 gives the
//    same bits as training without one (DP, TP + SP, ZeRO);
//  * overflow: inputs of 1e30 make float weight gradients overflow at a scale of 2^40 but
//    not at 1; the dynamic scale halves once per step, every step until the gradients are
//    finite is skipped by every rank with the parameters untouched — also when only one
//    replica's shard holds the huge inputs (ZeRO: only some devices see the Inf) — and the
//    first clean step applies exactly the update an unscaled run applies (scale 2^k);
//  * growth: after N clean steps the scale doubles;
//  * a checkpoint keeps the scale and counters: resuming is bit-identical;
//  * AMP O1: fp16 activations with FP32 masters and a loss scale match float64 within fp16
//    accuracy, and with the default dynamic scale (2^16) a GPT's loss falls.
// mpi-ranks: 1 2 4
#include "check_one_device.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>

#include "small_gpt.hpp"

using namespace strata;

namespace {

auto& W() { return mpi_test::world(); }

template <template <int, class...> class Strategy, int N, class... Extra>
using gpt = small_gpt::on<Strategy, N, 1, MicroBatch<2>, Extra...>;
using Mlp = Replicate<1, Linear<8, 32>, ReLU, Linear<32, 4>>;
template <class... Extra>
using mlp = Plan<Mlp, Loss<SoftmaxCrossEntropy>, MicroBatch<4>, Extra...>;

template <class P, class T>
struct run {
  trainer<P, T, Host, comm::mpi_communicator> t;
  explicit run(optimizer o) : t(W(), o, 0x5eed) { t.check_replicas_every(1); }
  // global batch `s` of G = dp × replica_batch samples; replica h's inputs × 1e30 (h = -1:
  // every replica's)
  static constexpr int no_huge = -2;
  step_result step(int s, int huge_replica = no_huge) {
    const std::size_t R = std::size_t(P::replica_batch), G = R * std::size_t(t.data_parallel());
    const std::size_t in = std::size_t(P::input_elems), lab = std::size_t(P::labels_per_sample);
    std::vector<master_t<T>> x(G * in);
    std::vector<std::int32_t> y(G * lab);
    verify::random_data<P>(5)(s, std::span<master_t<T>>(x), std::span<std::int32_t>(y));
    const std::size_t first = std::size_t(t.coord().data) * R;
    if (huge_replica != no_huge) {
      const std::size_t lo = huge_replica < 0 ? 0 : std::size_t(huge_replica) * R * in,
                        hi = huge_replica < 0 ? x.size() : lo + R * in;
      for (std::size_t i = lo; i < hi; ++i) x[i] *= 1e30f;
    }
    return t.step(batch_view<master_t<T>>{.inputs = std::span<const master_t<T>>(x).subspan(first * in, R * in),
                                          .labels = std::span<const std::int32_t>(y).subspan(first * lab, R * lab),
                                          .samples = R});
  }
};

template <class Plain, class Scaled>
void exact_power_of_two(const char* name) {
  if (W().size() % Plain::devices_per_replica != 0) return;
  const AdamW o{.lr = 1e-2};
  run<Plain, double> a(o);
  run<Scaled, double> b(o);
  for (int s = 0; s < 4; ++s) {
    a.step(s);
    CHECK(!b.step(s).skipped);
  }
  const bool same = a.t.gather_parameters() == b.t.gather_parameters();
  if (W().rank() == 0) std::printf("[scale] %-36s world %d  fixed scale 1024 bit-identical: %s\n", name, W().size(),
                                   same ? "yes" : "NO");
  CHECK(same);
}

}  // namespace

TEST_CASE("a power-of-two loss scale changes no bit") {
  exact_power_of_two<mlp<>, mlp<LossScale<FixedScale<1024>>>>("MLP, DP");
  exact_power_of_two<gpt<Split, 2, SequenceParallel>, gpt<Split, 2, SequenceParallel, LossScale<FixedScale<1024>>>>(
      "GPT, TP2 + SP");
  exact_power_of_two<mlp<Zero<1>>, mlp<Zero<1>, LossScale<FixedScale<1024>>>>("MLP, DP ZeRO-1");
}

// Gradients ~1e30 × scale overflow float: 2^40 does, 2^20 does not (the first weight's
// gradient is about 1e30 × 1e-2 × scale here).
template <class P>
void overflow(const char* name, int huge_replica) {
  using Scaled = P;
  const SGD o{.lr = 1e-32};
  run<Scaled, float> a(o);
  const auto p0 = a.t.gather_parameters();
  int skipped = 0;
  double scale = a.t.loss_scale();
  CHECK(scale == std::ldexp(1.0, 40));
  step_result r;
  while ((r = a.step(0, huge_replica)).skipped) {
    ++skipped;
    CHECK(a.t.loss_scale() == scale / 2);  // halved, on every rank
    scale = a.t.loss_scale();
    CHECK(a.t.gather_parameters() == p0);  // nothing applied
    REQUIRE(skipped < 40);
  }
  CHECK(a.t.updates() == 1);
  CHECK(a.t.steps() == skipped + 1);
  // the applied update equals an unscaled run's: the scale is a power of two
  using Plain = mlp<>;
  run<Plain, float> b(o);
  b.step(0, huge_replica);
  const bool same = a.t.gather_parameters() == b.t.gather_parameters();  // collective: on every rank
  CHECK(same);
  if (W().rank() == 0)
    std::printf("[overflow] %-32s world %d  skipped %d steps, scale 2^40 -> 2^%d, then the unscaled update: %s\n", name,
                W().size(), skipped, int(std::log2(scale)), same ? "yes" : "NO");
  CHECK(skipped >= 3);
}

TEST_CASE("overflow: every rank skips, the scale halves, then the update is the unscaled one") {
  overflow<mlp<LossScale<DynamicScale<40, 1000>>>>("MLP, every replica's inputs huge", -1);
  if (W().size() > 1) {
    overflow<mlp<LossScale<DynamicScale<40, 1000>>>>("MLP, only replica 1's inputs huge", 1);
    overflow<mlp<Zero<1>, LossScale<DynamicScale<40, 1000>>>>("MLP ZeRO-1, only replica 1's", 1);
  }
}

TEST_CASE("the dynamic scale doubles after N clean steps") {
  run<mlp<LossScale<DynamicScale<4, 3>>>, float> a(SGD{.lr = 0.01});
  a.t.set_training_options({.loss_scale_log = true});  // rank 0 prints the two changes
  std::vector<double> seen;
  for (int s = 0; s < 7; ++s) {
    seen.push_back(a.t.loss_scale());
    CHECK(!a.step(s).skipped);
  }
  CHECK(seen == std::vector<double>{16, 16, 16, 32, 32, 32, 64});
  CHECK(a.t.loss_scale() == 64);
}

TEST_CASE("a checkpoint keeps the loss scale: resume is bit-identical") {
  using P = mlp<LossScale<DynamicScale<40, 2>>>;
  std::int64_t id = W().rank() == 0 ? std::int64_t(std::random_device{}() & 0xffffff) : 0;
  W().comm().broadcast(&id, 1, 0);
  const std::string dir = (std::filesystem::temp_directory_path() / ("strata_scale_" + std::to_string(id))).string();
  const Adam o{.lr = 1e-3};
  run<P, float> straight(o);
  for (int s = 0; s < 8; ++s) straight.step(s, s < 3 ? 0 : -2);  // 3 overflowing batches first
  {
    run<P, float> first(o);
    for (int s = 0; s < 4; ++s) first.step(s, s < 3 ? 0 : -2);
    first.t.save_checkpoint(dir);
  }
  run<P, float> second(o);
  second.t.load_checkpoint(dir);
  CHECK(second.t.steps() == 4);
  for (int s = 4; s < 8; ++s) second.step(s);
  CHECK(second.t.loss_scale() == straight.t.loss_scale());
  CHECK(second.t.updates() == straight.t.updates());
  CHECK(second.t.gather_parameters() == straight.t.gather_parameters());
  W().comm().agree(true, "");
  if (W().rank() == 0) std::filesystem::remove_all(dir);
}

// AMP O1 (Element<f16>): fp16 compute, FP32 masters, gradients and state, a loss scale.
TEST_CASE("AMP O1: fp16 with a loss scale") {
  using Amp = gpt<Split, 2, SequenceParallel, Element<f16>, LossScale<FixedScale<1024>>>;
  static_assert(gpt<Split, 2, Element<f16>>::loss_scale::kind == loss_scale_kind::dynamic);  // the default
  if (W().size() == 2) mpi_test::check_one_device<Amp, f16, double>("amp", "f16 TP2 + SP, scale 1024", SGD{.lr = 0.1}, 1e-2, 6);
  using Dyn = gpt<Replicate, 1, Element<f16>>;
  run<Dyn, f16> a(AdamW{.lr = 3e-3});
  double first = 0, last = 0;
  int skipped = 0;
  for (int s = 0; s < 40; ++s) {
    const step_result r = a.step(s % 4);  // 4 batches, again and again: the loss must fall
    skipped += r.skipped;
    (s == 0 ? first : last) = r.loss;
  }
  if (W().rank() == 0)
    std::printf("[amp] f16 GPT, dynamic scale from 2^16    world %d  loss %.4f -> %.4f, %d steps skipped, scale %g\n",
                W().size(), first, last, skipped, a.t.loss_scale());
  CHECK(last < first * 0.9);
  CHECK(a.t.updates() == 40 - skipped);
  CHECK(a.t.loss_scale() <= 65536.0);
}
