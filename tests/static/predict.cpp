// The cost model's step time for a plan as written (cost::predict, plan/predict.hpp): a
// hand-cut pipeline equals the model's estimate of the same cut from a one-stage probe, and
// a context-parallel plan's messages are priced by their closed forms — the ring's sends
// (N − 1 blocks forward and backward, N gradient blocks), the all-gather's collectives; and
// the search's estimates re-priced on its own description come back unchanged.
#include <array>
#include <cstdio>

#include <strata/plan/predict.hpp>
#include <strata/plan/search.hpp>
#include <strata/strata.hpp>

using namespace strata;

namespace {

constexpr hardware A100 = hw::A100_80GB::value;
constexpr bool near(double a, double b) { return a - b <= 1e-9 * (b > 0 ? b : -b) + 1e-15 && b - a <= 1e-9 * (b > 0 ? b : -b) + 1e-15; }

// ---- a pipeline as written against the same cut of a one-stage probe ----------------------
using Lin = Linear<1024, 1024>;
using CE = Loss<SoftmaxCrossEntropy>;
using Probe = Plan<Replicate<1, Repeat<4, Lin>>, Input<512, 1024>, CE, MicroBatch<1>, Element<bf16>>;
constexpr auto probe_profile = cost::profile_of<Probe, 4>(std::array<int, 5>{0, 1, 2, 3, 4}, A100);
template <class Sched>
using PP2 = Plan<Pipeline<Replicate<1, Lin, Lin>, Replicate<1, Lin, Lin>>, Input<512, 1024>, CE, MicroBatch<1>,
                 NumMicroBatch<8>, Element<bf16>, Schedule<Sched>>;
template <class Sched>
constexpr cost::step_estimate by_hand(int data) {
  const cost::parallel_config c{.tensor = 1, .pipeline = 2, .data = data, .micro_batch = 1, .micro_batches = 8,
                                .schedule = cost::price_of<Sched>};
  return cost::estimate<4, 2>(probe_profile, std::array<int, 3>{0, 2, 4}, c, A100);
}
static_assert(near(cost::predict<PP2<PreferBackward>>(A100).step_s, by_hand<PreferBackward>(1).step_s));
static_assert(near(cost::predict<PP2<ZeroBubbleH1>>(A100).step_s, by_hand<ZeroBubbleH1>(1).step_s));
static_assert(near(cost::predict<PP2<PreferBackward>>(A100, 4).step_s, by_hand<PreferBackward>(4).step_s));
static_assert(near(cost::predict<PP2<PreferBackward>>(A100, 4).data_comm_s, by_hand<PreferBackward>(4).data_comm_s));
static_assert(cost::predict<PP2<PreferBackward>>(A100).bubble_s > 0);
// Devices that share compute (hardware::shared_compute: more processes than cores): no
// bubble, and the stages' mean compute — M · (the whole model's time per micro-batch) / p;
// one stage prices alike either way
constexpr hardware A100_shared = [] {
  hardware h = A100;
  h.shared_compute = true;
  return h;
}();
constexpr double model_s = [] {
  double t = 0;
  for (const auto& u : probe_profile.units) t += u.forward_s + u.backward_s;
  return t;
}();
constexpr cost::step_estimate shared = cost::predict<PP2<PreferBackward>>(A100_shared);
static_assert(shared.bubble_s == 0 && near(shared.compute_s, 8 * model_s / 2));
static_assert(near(shared.step_s, shared.compute_s + shared.pipeline_comm_s + shared.optimizer_s));
static_assert(shared.step_s < cost::predict<PP2<PreferBackward>>(A100).step_s);
static_assert(near(cost::predict<Probe>(A100_shared).step_s, cost::predict<Probe>(A100).step_s));
// A runtime's own optimizer and gradient passes (hardware::optimizer_bytes_per_param,
// grad_pack_bytes_per_param: Megatron-LM's fp16 optimizer, its local DDP's flatten and
// copy-back): 52 bytes per parameter against strata's fused 7 · 4 + 2, and 12 bytes per
// parameter of a stage (two Linear<1024, 1024>) where a data group reduces.
constexpr hardware A100_runtime = [] {
  hardware h = A100;
  h.optimizer_bytes_per_param = 52;
  h.grad_pack_bytes_per_param = 12;
  return h;
}();
constexpr double stage_params = 2 * (1024.0 * 1024 + 1024), hbm_rate = A100.hbm_bytes_per_s * A100.hbm_efficiency;
static_assert(near(cost::predict<PP2<PreferBackward>>(A100).optimizer_s, stage_params * 30 / hbm_rate));
static_assert(near(cost::predict<PP2<PreferBackward>>(A100_runtime).optimizer_s, stage_params * 52 / hbm_rate));
static_assert(near(cost::predict<PP2<PreferBackward>>(A100_runtime, 4).data_comm_s -
                       cost::predict<PP2<PreferBackward>>(A100, 4).data_comm_s,
                   stage_params * 12 / hbm_rate));
static_assert(cost::predict<PP2<PreferBackward>>(A100_runtime).data_comm_s == 0, "no data group, nothing reduced");
// SequenceParallel: a column-parallel Linear after a row-wise LayerNorm (after a row-parallel
// pair's reduce-scatter) gathers its input forward, reduce-scatters its input's gradient
// backward, and gathers its kept row split again before its backward: three collectives of
// [512, 1024] bf16 over 2 devices.
using SPLin = Plan<Split<2, Lin, Lin, LayerNorm<1024>, Lin, Lin>, Input<512, 1024>, CE, MicroBatch<1>, Element<bf16>,
                   SequenceParallel>;
constexpr auto sp_profile = cost::profile_of<SPLin, 5>(std::array<int, 6>{0, 1, 2, 3, 4, 6}, A100);
static_assert(SPLin::lowering::tables.calls[3].regather && !SPLin::lowering::tables.calls[0].regather);
static_assert(near(sp_profile.units[3].tensor_comm_s,
                   3 * cost::collective_s(collective::all_gather, 512.0 * 1024 * 2, 2, cost::link_of(A100, true))),
              "SequenceParallel: the Linear's forward gather, backward reduce-scatter and backward gather");
// ... and where a schedule splits the backward, the gather again before W (plan/lower/buckets.hpp)
template <class Sched>
constexpr cost::step_estimate sp_estimate() {
  const cost::parallel_config c{.tensor = 2, .pipeline = 1, .data = 1, .micro_batch = 1, .micro_batches = 8,
                                .schedule = cost::price_of<Sched>};
  return cost::estimate<5, 1>(sp_profile, std::array<int, 2>{0, 5}, c, A100);
}
static_assert(near(sp_estimate<ZeroBubbleH1>().tensor_comm_s - sp_estimate<PreferBackward>().tensor_comm_s,
                   8 * cost::collective_s(collective::all_gather, 512.0 * 1024 * 2, 2, cost::link_of(A100, true))),
              "SequenceParallel under a split backward: one more gather per micro-batch, before W");
// A view at a part's edge copies (plan/lower/parts.hpp): stage 0's last layer its output in
// forward, stage 1's first its input gradient in backward — a read and a write of [512, 1024]
// bf16 each, M = 8 times on each stage; inside a part the same view costs nothing.
using View = Dropout<0>;
using PPV = Plan<Pipeline<Replicate<1, Lin, Lin, View>, Replicate<1, View, Lin, Lin>>, Input<512, 1024>, CE,
                 MicroBatch<1>, NumMicroBatch<8>, Element<bf16>, Schedule<PreferBackward>>;
using PPI = Plan<Pipeline<Replicate<1, Lin, View, Lin>, Replicate<1, Lin, View, Lin>>, Input<512, 1024>, CE,
                 MicroBatch<1>, NumMicroBatch<8>, Element<bf16>, Schedule<PreferBackward>>;
constexpr double view_copy_s = 2.0 * 512 * 1024 * 2 / (A100.hbm_bytes_per_s * A100.hbm_efficiency);
static_assert(near(cost::predict<PPV>(A100).compute_s - cost::predict<PP2<PreferBackward>>(A100).compute_s,
                   8 * view_copy_s),
              "a view at a part's edge: one copy per micro-batch on each stage");
static_assert(near(cost::predict<PPI>(A100).compute_s, cost::predict<PP2<PreferBackward>>(A100).compute_s),
              "a view inside a part: no copy");

// ---- context parallelism: attention's messages, closed form ----------------------------
// One causal attention layer of D = 64 (4 heads of 16) over Seq = 256, float, one sequence
// per micro-batch, 4 micro-batches, on Context<N>: the only collectives are attention's.
constexpr int V = 32, S = 256, D = 64;
template <int N, class... Mode>
using CP = Plan<Context<N, Embedding<V, D>, CausalSelfAttention<D, 4, S>, Linear<D, V>>, Input<S>, CE, MicroBatch<1>,
                NumMicroBatch<4>, Mode...>;
// the A100's NVLink as the model sustains it; NCCL's latencies: one ring step, one call
constexpr double link = 200e9, lat = 3.4e-6, call = 8.4e-6;
// ring: each device's k and v (S/N positions × 2 × 64 floats) sent N − 1 times forward, N − 1
// backward, and their gradients N times, per micro-batch
template <int N>
constexpr double ring_s = 4 * (3 * N - 2) * ((double(S) / N * 2 * D * 4) / link + lat + call);
static_assert(near(cost::predict<CP<2, ContextRing>>(A100).tensor_comm_s, ring_s<2>));
static_assert(near(cost::predict<CP<4, ContextRing>>(A100).tensor_comm_s, ring_s<4>));
// all-gather: the whole sequence's k and v gathered forward and backward and their gradients
// reduce-scattered, each in two calls of half of it: (N − 1)/N of the bytes and N − 1 steps each
template <int N>
constexpr double gather_s = 4 * 3 * 2 * ((N - 1.0) / N * (double(S) * 2 * D * 4 / 2) / link + (N - 1) * lat + call);
static_assert(near(cost::predict<CP<2>>(A100).tensor_comm_s, gather_s<2>));
static_assert(near(cost::predict<CP<4>>(A100).tensor_comm_s, gather_s<4>));
// a Context<N> part holds the whole model on each device: its gradients are all-reduced over
// the N devices (and the replicas): Embedding 32·64, attention 64·192 + 192 + 64·64 + 64, head
// 64·32 + 32 parameters in fp32
constexpr double cp_grads = (32.0 * 64 + 64 * 192 + 192 + 64 * 64 + 64 + 64 * 32 + 32) * 4;
static_assert(near(cost::predict<CP<2, ContextRing>>(A100).data_comm_s, 2 * 0.5 * cp_grads / link + 2 * lat + call));
static_assert(near(cost::predict<CP<2, ContextRing>>(A100, 2).data_comm_s, 2 * 0.75 * cp_grads / link + 2 * 3 * lat + call));
// the same attention work split N ways: compute shrinks with N
static_assert(cost::predict<CP<4, ContextRing>>(A100).compute_s < cost::predict<CP<2, ContextRing>>(A100).compute_s);

// ---- the search's estimates, re-priced ----------------------------------------------------
// Search::reprice prices a configuration as the search does on another description; on the
// search's own it gives back every estimate the search made, and a configuration's plan as
// written (micro-batch 1: the probe's own size, so nothing is scaled) predicts the same step.
using Small = Model<Embedding<V, D>, PositionEmbedding<S, D>, Repeat<2, Residual<LayerNorm<D>, CausalSelfAttention<D, 4, S>>,
                                                               Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>>,
                    LayerNorm<D>, Linear<D, V>>;
using Found = Search<Small, 4, 4096, 8, hw::A100_80GB, TensorDegrees<1, 2>, Input<S>, CE>;
constexpr int first_mb1_pipelined = [] {
  for (int i = 0; i < Found::all.size; ++i) {
    const candidate& c = Found::all.rows[static_cast<std::size_t>(i)];
    if (c.micro_batch == 1 && c.pipeline == 2 && c.tensor == 2 && c.zero == 0) return i;
  }
  return -1;
}();
static_assert(first_mb1_pipelined >= 0);
constexpr candidate mb1 = Found::all.rows[static_cast<std::size_t>(first_mb1_pipelined)];
static_assert(near(cost::predict<Found::plan_of_candidate<first_mb1_pipelined>>(A100, mb1.data).step_s,
                   mb1.estimate.step_s));
// ... and its memory, with every block recomputed (a region's kept input, its buffers)
constexpr int first_mb1_recomputed = [] {
  for (int i = 0; i < Found::all.size; ++i) {
    const candidate& c = Found::all.rows[static_cast<std::size_t>(i)];
    if (c.micro_batch == 1 && c.pipeline == 2 && c.recompute && c.zero == 0 && c.schedule == 0) return i;
  }
  return -1;
}();
static_assert(first_mb1_recomputed >= 0);
constexpr candidate rc1 = Found::all.rows[static_cast<std::size_t>(first_mb1_recomputed)];
using RC1 = Found::plan_of_candidate<first_mb1_recomputed>;
constexpr cost::step_estimate rc1_plan = cost::predict<RC1>(A100, rc1.data);
static_assert(near(rc1_plan.step_s, rc1.estimate.step_s));
// Both bound the lowered plan's memory from above. The search's probe sees each block's
// region whole; the plan's first stage ends with a block, whose region stops before its last
// layer (its output is the stage's message, counted as such): the search counts that one
// output, [S, D] floats, in the region as well.
static_assert(rc1_plan.memory_bytes >= RC1::peak_memory_bytes(0, rc1.data) &&
              rc1_plan.memory_bytes >= RC1::peak_memory_bytes(1, rc1.data));
static_assert(rc1.estimate.memory_bytes - rc1_plan.memory_bytes == S * D * 4);

// ---- a link measured as nccl-tests measures it, solved back (runtime/calibrate.hpp) ------
// An all-reduce of one float and of 32 KiB over 2 devices timed at 1.0 and 16.6 us on a
// 14.3 GB/s link with 0.41 us steps (two host processes): the fit's call latency and
// efficiency give both times back through collective_s.
constexpr double ar_rate = 14.3e9, ar_step = 0.41e-6, ar_small = 1.0e-6, ar_large = 16.6e-6, ar_bytes = 32768;
constexpr cost::all_reduce_fit ar_fit = cost::fit_all_reduce(ar_small, ar_large, ar_bytes, ar_rate, ar_step);
constexpr cost::link_price ar_link{ar_rate * ar_fit.efficiency, ar_step, ar_fit.call_s};
static_assert(near(cost::collective_s(collective::all_reduce, 4, 2, ar_link), ar_small),
              "fit_all_reduce: the one-float all-reduce comes back");
static_assert(near(cost::collective_s(collective::all_reduce, ar_bytes, 2, ar_link), ar_large),
              "fit_all_reduce: the 32 KiB all-reduce comes back");
static_assert(ar_fit.efficiency > 0.13 && ar_fit.efficiency < 0.15 && ar_fit.call_s > 0.1e-6 && ar_fit.call_s < 0.2e-6,
              "fit_all_reduce: 32 KiB / 14.3 GB/s = 2.29 us of 15.6 us moving: efficiency 0.147, call 0.18 us");
// a small all-reduce faster than the ring's two steps: no negative latency, the large one kept
constexpr cost::all_reduce_fit ar_fast = cost::fit_all_reduce(0.5e-6, ar_large, ar_bytes, ar_rate, ar_step);
static_assert(ar_fast.call_s == 0 && near(cost::collective_s(collective::all_reduce, ar_bytes, 2,
                                                             {ar_rate * ar_fast.efficiency, ar_step, 0}),
                                          ar_large),
              "fit_all_reduce: latency-bound below the ring's steps, the large all-reduce still comes back");
// a link faster than its rate (a measurement out of line): efficiency capped at 1
static_assert(cost::fit_all_reduce(1e-6, 2e-6, ar_bytes, ar_rate, ar_step).efficiency == 1,
              "fit_all_reduce: efficiency at most 1");
// A calibrated description prices a point-to-point message (a pipeline's activations) at the
// sendrecv's own rate, the collectives at the fitted fraction of it; a data-sheet one (no
// p2p_efficiency) prices both at the collectives'.
constexpr hardware ar_hw = [] {
  hardware h{};
  h.intra_bytes_per_s = h.inter_bytes_per_s = ar_rate;
  h.intra_latency_s = h.inter_latency_s = ar_step;
  h.collective_latency_s = ar_fit.call_s;
  h.intra_efficiency = h.inter_efficiency = ar_fit.efficiency;
  h.p2p_efficiency = 1;
  return h;
}();
constexpr hardware ar_sheet = [] {
  hardware h = ar_hw;
  h.p2p_efficiency = 0;
  return h;
}();
static_assert(near(cost::collective_s(collective::send_recv, ar_bytes, 2, cost::link_of(ar_hw, true)),
                   ar_bytes / ar_rate + ar_step + ar_fit.call_s),
              "p2p_efficiency: a calibrated sendrecv moves at the measured link rate");
static_assert(near(cost::collective_s(collective::all_reduce, ar_bytes, 2, cost::link_of(ar_hw, false)), ar_large),
              "p2p_efficiency: the collectives keep the fitted efficiency");
static_assert(near(cost::collective_s(collective::send_recv, ar_bytes, 2, cost::link_of(ar_sheet, true)),
                   ar_bytes / (ar_rate * ar_fit.efficiency) + ar_step + ar_fit.call_s),
              "p2p_efficiency 0: a sendrecv at the collectives' efficiency");

}  // namespace

int main() {
  int bad = 0;
  for (int i = 0; i < Found::all.size; ++i) {
    const candidate& c = Found::all.rows[static_cast<std::size_t>(i)];
    const double again = Found::reprice(c, A100).step_s;
    if (!near(again, c.estimate.step_s)) {
      std::printf("configuration %d: re-priced %.9g s, the search's %.9g s\n", i, again, c.estimate.step_s);
      ++bad;
    }
  }
  std::printf("%d configurations re-priced, %d differ\n", Found::all.size, bad);
  if (bad > 0 || Found::all.size < 50) return 1;
  const auto e = cost::predict<CP<4, ContextRing>>(A100);
  std::printf("CP4 ring on the A100 description: step %.3f us, attention messages %.3f us\n", e.step_s * 1e6,
              e.tensor_comm_s * 1e6);
  return 0;
}
