// ZeRO (Zero<1>, <2>, <3>), the learning-rate schedule, weight-decay groups and global-norm
// clipping under every strategy, against the same model on one device without any of
// the partitioning (strata::verify::against_one_device: losses and every parameter each
// step, evaluation, bytes per collective against the cost model — reduce-scatter and
// all-gather in place of the all-reduce —, replicas bit for bit): float64 within 1e-9.
// The clipping norm must count every parameter exactly once whatever the plan: it is
// compared with the one-device norm, and the clipped update with its closed form.
// mpi-ranks: 2 4 8
#include "check_one_device.hpp"

#include <cmath>
#include <cstdio>

#include <strata/plan/search.hpp>
#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>

#include "small_gpt.hpp"

using namespace strata;

namespace {

template <template <int, class...> class Strategy, int N, class... Extra>
using whole = small_gpt::on<Strategy, N, 2, Extra...>;
template <class... Extra>
using pipe = small_gpt::staged<Split, 2, MicroBatch<2>, NumMicroBatch<4>, Extra...>;
template <class... Extra>
using pipe1 = small_gpt::staged<Replicate, 1, MicroBatch<2>, NumMicroBatch<4>, Extra...>;

bool world_is(int n) { return mpi_test::world().size() == n; }

const AdamW adamw{.lr = 1e-2, .weight_decay = 0.1};
const SGD sgd{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01};

// Buckets<3> with odd sizes leaves tails (bucket sizes not divisible by the group)
using DP_Z = whole<Replicate, 1, MicroBatch<2>, NumMicroBatch<2>, Zero<1>, Buckets<3>>;
using TP2_Z = whole<Split, 2, MicroBatch<4>, SequenceParallel, Zero<1>>;
using PP2_Z = pipe1<Zero<1>>;
using HYBRID_Z = pipe<Zero<1>, SequenceParallel>;
using TP2 = whole<Split, 2, MicroBatch<4>, SequenceParallel>;
using HYBRID = pipe<SequenceParallel>;

static_assert(DP_Z::zero == 1 && TP2::zero == 0);

// Zero<2> (gradients partitioned, reduce-scattered after every micro-batch) and Zero<3>
// (parameters too, gathered per TaskGraph) on four TaskGraphs per device
template <template <int, class...> class Strategy, int N, class... Extra>
using graphs = small_gpt::graphs<Strategy, N, Extra...>;
using DP_Z2 = graphs<Replicate, 1, MicroBatch<2>, NumMicroBatch<2>, Zero<2>, Buckets<3>>;
using DP_Z3 = graphs<Replicate, 1, MicroBatch<2>, NumMicroBatch<2>, Zero<3>, Buckets<3>>;
using TP2_Z3 = graphs<Split, 2, MicroBatch<4>, NumMicroBatch<2>, SequenceParallel, Zero<3>>;
using PP2_Z3 = pipe1<Zero<3>>;
using HYBRID_Z3 = pipe<Zero<3>, SequenceParallel>;
using DP_Z3_OFF = graphs<Replicate, 1, MicroBatch<2>, NumMicroBatch<2>, Zero<3>, Offload<offload_level::weights_and_state>>;
using DP_Z2_H = graphs<Replicate, 1, MicroBatch<2>, NumMicroBatch<2>, Zero<2>, Buckets<3>, HalfGradientReduce<64>>;
static_assert(DP_Z3::num_taskgraphs == 4 && DP_Z3::staged_weights);

// gradients reduced in fp16 (EPL communication.fp16, fp16_scale 128): half the bytes
using DP_H = whole<Replicate, 1, MicroBatch<2>, NumMicroBatch<2>, HalfGradientReduce<128>>;
using DP_ZH = whole<Replicate, 1, MicroBatch<2>, NumMicroBatch<2>, Zero<1>, Buckets<3>, HalfGradientReduce<64>>;
static_assert(DP_H::communication(0, 2).rows[DP_H::communication(0, 2).size - 1].bytes * 2 ==
              whole<Replicate, 1, MicroBatch<2>, NumMicroBatch<2>>::communication(0, 2)
                  .rows[DP_H::communication(0, 2).size - 1]
                  .bytes);

const training_options gpt_recipe{
    .schedule = {.kind = lr_schedule::decay::cosine, .warmup = 2, .total = 5, .final_ratio = 0.1},
    .decay = decay_on::matrices,
    .clip_norm = 0.5};

}  // namespace

TEST_CASE("ZeRO-1 equals plain data parallelism and one device") {
  if (world_is(2)) mpi_test::check_one_device<DP_Z>("zero", "DP2 ZeRO-1 (AdamW)", adamw, 1e-9, 6);
  if (world_is(4)) mpi_test::check_one_device<DP_Z>("zero", "DP4 ZeRO-1 (SGD momentum)", sgd, 1e-9, 6);
  if (world_is(4)) mpi_test::check_one_device<TP2_Z>("zero", "TP2 + SP x DP2 ZeRO-1", adamw, 1e-9, 6);
  if (world_is(2)) mpi_test::check_one_device<TP2_Z>("zero", "TP2 + SP ZeRO-1 (whole tensors split over TP)", adamw,
                                                     1e-9, 6);
  if (world_is(4)) mpi_test::check_one_device<PP2_Z>("zero", "PP2 x DP2 ZeRO-1, 4 micro-batches", adamw, 1e-9, 6);
  if (world_is(8)) mpi_test::check_one_device<HYBRID_Z>("zero", "DP2 x PP2 x TP2 + SP ZeRO-1", adamw, 1e-9, 6);
  if (world_is(2)) mpi_test::check_one_device<DP_Z, bf16, double>("zero", "bf16 DP2 ZeRO-1", SGD{.lr = 0.1}, 3e-2, 4);
}

TEST_CASE("ZeRO-2 and ZeRO-3 equal one device") {
  if (world_is(2)) mpi_test::check_one_device<DP_Z2>("zero", "DP2 ZeRO-2 (AdamW)", adamw, 1e-9, 6);
  // one TaskGraph per stage: each backward's gradients in the slot its previous one did not use
  if (world_is(2)) mpi_test::check_one_device<pipe1<Zero<2>>>("zero", "PP2 ZeRO-2, 4 micro-batches", adamw, 1e-9, 6);
  if (world_is(4)) mpi_test::check_one_device<DP_Z2>("zero", "DP4 ZeRO-2 (SGD momentum)", sgd, 1e-9, 6);
  if (world_is(2)) mpi_test::check_one_device<DP_Z3>("zero", "DP2 ZeRO-3 (AdamW)", adamw, 1e-9, 6);
  if (world_is(4)) mpi_test::check_one_device<DP_Z3>("zero", "DP4 ZeRO-3 (SGD momentum)", sgd, 1e-9, 6);
  if (world_is(4)) mpi_test::check_one_device<TP2_Z3>("zero", "TP2 + SP x DP2 ZeRO-3", adamw, 1e-9, 6);
  if (world_is(4)) mpi_test::check_one_device<pipe1<Zero<2>>>("zero", "PP2 x DP2 ZeRO-2, 4 micro-batches", adamw, 1e-9,
                                                                 6);
  if (world_is(4)) mpi_test::check_one_device<PP2_Z3>("zero", "PP2 x DP2 ZeRO-3, 4 micro-batches", adamw, 1e-9, 6);
  if (world_is(8)) mpi_test::check_one_device<HYBRID_Z3>("zero", "DP2 x PP2 x TP2 + SP ZeRO-3", adamw, 1e-9, 6);
  if (world_is(2)) mpi_test::check_one_device<DP_Z3_OFF>("zero", "DP2 ZeRO-3 + offloaded weights and state", adamw,
                                                         1e-9, 6);
  if (world_is(2)) mpi_test::check_one_device<DP_Z3, bf16, double>("zero", "bf16 DP2 ZeRO-3", SGD{.lr = 0.1}, 3e-2, 4);
}

// The search's ZeRO-3 configurations are ordinary plans: each unit its own TaskGraph,
// gathered per pass; on 4 devices with one stage, and with two recomputed stages.
namespace searched {
using namespace small_gpt;
using GPT = Model<Embedding<V, D>, PositionEmbedding<S, D>, Repeat<2, Attn, MLP>, LayerNorm<D>, Linear<D, V>>;
using Found = Search<GPT, 4, 64, 16, hw::A100_80GB, TensorDegrees<1>, Input<S>, CE>;
constexpr int zero3(int pipeline, bool recompute) {
  for (int i = 0; i < Found::all.size; ++i) {
    const candidate& c = Found::all.rows[static_cast<std::size_t>(i)];
    if (c.zero == 3 && c.pipeline == pipeline && c.recompute == recompute && c.micro_batch == 2 && c.chunks == 1)
      return i;
  }
  return -1;
}
using DP4 = Found::plan_of_candidate<zero3(1, false)>;
using PP2_DP2 = Found::plan_of_candidate<zero3(2, true)>;
static_assert(DP4::zero == 3 && DP4::num_taskgraphs == 8 && DP4::data_parallel() == 4);
static_assert(PP2_DP2::zero == 3 && PP2_DP2::stages == 2 && PP2_DP2::num_taskgraphs == 8 && PP2_DP2::recompute_regions > 0);
}  // namespace searched

TEST_CASE("the search's ZeRO-3 plans equal one device") {
  if (world_is(4)) mpi_test::check_one_device<searched::DP4>("zero", "searched DP4 ZeRO-3, unit TaskGraphs", adamw, 1e-9, 6);
  if (world_is(4)) mpi_test::check_one_device<searched::PP2_DP2>("zero", "searched PP2 x DP2 ZeRO-3, recomputed", adamw,
                                                                  1e-9, 6);
}

// fp16 rounding of each gradient (and of the fp16 partial sums): float runs against a
// float64 device, within fp16 accuracy; the bytes moved are the plan's (2 per element).
TEST_CASE("gradients reduced in fp16") {
  if (world_is(2)) mpi_test::check_one_device<DP_H, float, double>("half", "DP2, fp16 all-reduce", adamw, 1e-2, 6);
  if (world_is(4)) mpi_test::check_one_device<DP_ZH, float, double>("half", "DP4 ZeRO-1, fp16 reduce-scatter", sgd, 1e-2, 6);
  if (world_is(4)) mpi_test::check_one_device<DP_H, double>("half", "DP4 float64 (fp16 rounding only)", sgd, 1e-2, 6);
  if (world_is(4)) mpi_test::check_one_device<DP_Z2_H, float, double>("half", "DP4 ZeRO-2, fp16 reduce-scatter", sgd, 1e-2, 6);
}

TEST_CASE("schedule, decay groups and clipping equal one device") {
  if (world_is(2)) mpi_test::check_one_device<TP2>("recipe", "TP2 + SP", adamw, 1e-9, 6, gpt_recipe);
  if (world_is(4)) mpi_test::check_one_device<DP_Z>("recipe", "DP4 ZeRO-1", adamw, 1e-9, 6, gpt_recipe);
  if (world_is(8)) mpi_test::check_one_device<HYBRID>("recipe", "DP2 x PP2 x TP2 + SP", adamw, 1e-9, 6, gpt_recipe);
  if (world_is(8)) mpi_test::check_one_device<HYBRID_Z>("recipe", "DP2 x PP2 x TP2 + SP ZeRO-1", sgd, 1e-9, 6,
                                                        gpt_recipe);
  if (world_is(4)) mpi_test::check_one_device<TP2_Z3>("recipe", "TP2 + SP x DP2 ZeRO-3", adamw, 1e-9, 6, gpt_recipe);
}

// One clipped SGD step (no momentum, no decay): Δp = −lr · g · c with c = clip / (‖g‖ +
// 1e-6), so ‖Δp‖ / lr = clip · ‖g‖ / (‖g‖ + 1e-6) — and ‖g‖ must be the one-device norm.
template <class P>
void clipped_step(const char* name) {
  auto& w = mpi_test::world();
  if (w.size() % P::devices_per_replica != 0) return;
  const SGD plain{.lr = 0.5};
  const training_options clip{.clip_norm = 1e-3};
  auto par = make_trainer<P, double>(w, plain);
  par.set_training_options(clip);
  auto one = one_device_world<Host>::make();
  auto ref = make_trainer<verify::one_device_plan<P>, double>(one, plain);
  ref.set_training_options(clip);
  const int dp = par.data_parallel();
  const std::size_t Sm = std::size_t(P::replica_batch), G = Sm * std::size_t(dp);
  std::vector<double> x(G * std::size_t(P::input_elems));
  std::vector<std::int32_t> y(G * std::size_t(P::labels_per_sample));
  verify::random_data<P>(99)(0, std::span<double>(x), std::span<std::int32_t>(y));
  const std::size_t in = std::size_t(P::input_elems), lab = std::size_t(P::labels_per_sample);
  const std::size_t mine = std::size_t(par.coord().data) * Sm;
  const auto before = par.gather_parameters();
  par.step(batch_view<double>{.inputs = std::span<const double>(x).subspan(mine * in, Sm * in),
                              .labels = std::span<const std::int32_t>(y).subspan(mine * lab, Sm * lab),
                              .samples = Sm});
  ref.step(batch_view<double>{.inputs = x, .labels = y, .samples = G});
  const auto after = par.gather_parameters();
  double moved = 0;
  for (std::size_t i = 0; i < after.size(); ++i)
    for (std::size_t k = 0; k < after[i].size(); ++k)
      for (std::size_t j = 0; j < after[i][k].size(); ++j)
        moved += (after[i][k][j] - before[i][k][j]) * (after[i][k][j] - before[i][k][j]);
  const double norm = par.last_gradient_norm(), expect = clip.clip_norm * norm / (norm + 1e-6);
  const double got = std::sqrt(moved) / plain.lr;
  if (w.rank() == 0)
    std::printf("[clip] %-36s world %d  |g| %.12f (one device %.12f)  |dp|/lr %.3e  closed form %.3e\n", name,
                w.size(), norm, ref.last_gradient_norm(), got, expect);
  CHECK(norm > 10 * clip.clip_norm);  // the clip is active
  CHECK(std::abs(norm - ref.last_gradient_norm()) <= 1e-12 * norm);
  CHECK(std::abs(got - expect) <= 1e-9 * expect);
}

TEST_CASE("the clipping norm counts every parameter once") {
  if (world_is(2)) clipped_step<TP2>("TP2 + SP (LayerNorm on both devices)");
  if (world_is(4)) clipped_step<DP_Z>("DP4 ZeRO-1 (chunks and tails)");
  if (world_is(8)) clipped_step<HYBRID>("DP2 x PP2 x TP2 + SP");
  if (world_is(8)) clipped_step<HYBRID_Z>("DP2 x PP2 x TP2 + SP ZeRO-1");
  if (world_is(4)) clipped_step<DP_Z3>("DP4 ZeRO-3");
  if (world_is(8)) clipped_step<HYBRID_Z3>("DP2 x PP2 x TP2 + SP ZeRO-3");
}
