// The cost model and the compile-time search: a unit's time against the roofline written
// out by hand, a pipeline's step against its closed form (M + p − 1) · stage + update,
// the balanced cut against a brute force, and the search's choice against every
// configuration it tried; the chosen plan is an ordinary plan with those degrees whose
// lowered memory fits the budget.
#include <array>
#include <cstdio>

#include <strata/plan/search.hpp>
#include <strata/strata.hpp>

using namespace strata;

namespace {

constexpr hardware A100 = hw::A100_80GB::value;
// NCCL's latencies (hw::nccl_*): a ring step over NVLink, a collective call
constexpr double step_lat = 3.4e-6, call_lat = 8.4e-6;
constexpr bool near(double a, double b) { return a - b < 1e-9 * (b > 0 ? b : -b) + 1e-15 && b - a < 1e-9 * (b > 0 ? b : -b) + 1e-15; }

// ---- one unit's time: a compute-bound Linear, by hand -----------------------------------
// Linear<1024, 1024> on 512 rows of bf16 is three GEMMs: forward and dgrad 512 × 1024 × 1024,
// wgrad 1024 × 1024 × 512 (the bias rides in the epilogue). On the A100's 108 SMs the
// 128×128 tile is the fastest of the three: 4 · 8 = 32 tiles (forward, dgrad) and 8 · 8 = 64
// (wgrad), one wave each, so a GEMM keeps m·n / (108 · 128²) of the SM-time useful; the
// FLOPs run at 80.6% of 312 TFLOP/s on that share, and the bytes (A, B, C once) take less
// time at the 48.6% of 2039 GB/s a GEMM kernel streams (hw::measured_gemm_hbm_efficiency).
using Lin = Linear<1024, 1024>;
using LinProbe = Plan<Replicate<1, Repeat<4, Lin>>, Input<512, 1024>, Loss<SoftmaxCrossEntropy>, MicroBatch<1>,
                      Element<bf16>>;
constexpr auto lin_profile = cost::profile_of<LinProbe, 4>(std::array<int, 5>{0, 1, 2, 3, 4}, A100);
constexpr double rate = 312e12 * 0.806;
constexpr double lin_fwd = 2.0 * 512 * 1024 * 1024 / (rate * (512.0 * 1024 / (108 * 128 * 128)));
constexpr double lin_wgrad = 2.0 * 1024 * 1024 * 512 / (rate * (1024.0 * 1024 / (108 * 128 * 128)));
static_assert(near(lin_profile.units[0].forward_s, lin_fwd));
static_assert(near(lin_profile.units[0].backward_s, lin_fwd + lin_wgrad));
static_assert((3 * 512.0 * 1024) * 2 / (2039e9 * 0.486) < lin_fwd);  // A, B, C: compute-bound
static_assert(lin_profile.units[0].recompute_s == 0 && lin_profile.units[0].tensor_comm_s == 0);
static_assert(near(lin_profile.units[0].local_params, 1024.0 * 1024 + 1024));

// ---- materialized attention: the passes over the score tensor -------------------------
// Dropout on the probabilities adds a read, a write and a 1-byte mask per score each way:
// (2 + 1/2) · items · s² · 2 bytes at 90% of 2039 GB/s, items = 2 sequences × 4 heads.
using Att = CausalSelfAttention<256, 4, 128>;
using AttProbe = Plan<Replicate<1, Att>, Input<128, 256>, Loss<SoftmaxCrossEntropy>, MicroBatch<2>, Element<bf16>>;
constexpr hardware A100_materialized = [] {
  hardware h = A100;
  h.attention = attention_kernels::materialized;  // Megatron-LM 2021's attention
  return h;
}();
constexpr hardware A100_dropout = [] {
  hardware h = A100_materialized;
  h.attention_dropout = true;
  return h;
}();
constexpr auto att_plain = cost::profile_of<AttProbe, 1>(std::array<int, 2>{0, 1}, A100_materialized);
constexpr auto att_drop = cost::profile_of<AttProbe, 1>(std::array<int, 2>{0, 1}, A100_dropout);
constexpr double drop_s = 2.5 * (2 * 4 * 128.0 * 128 * 2) / (2039e9 * 0.90);
static_assert(near(att_drop.units[0].forward_s - att_plain.units[0].forward_s, drop_s));
static_assert(near(att_drop.units[0].backward_s - att_plain.units[0].backward_s, drop_s));

// ---- a pipeline's step: (M + p − 1) · slowest stage + update, closed form ----------------
constexpr std::array<int, 3> halves{0, 2, 4};
constexpr cost::parallel_config pp2{.tensor = 1, .pipeline = 2, .data = 1, .micro_batch = 2, .micro_batches = 8};
constexpr cost::step_estimate pp2_e = cost::estimate<4, 2>(lin_profile, halves, pp2, A100);
constexpr double stage_time(int s) {  // two units at micro-batch 2 (twice the probe's), plus the loss on stage 1
  double t = 0;
  for (int u = 2 * s; u < 2 * s + 2; ++u)
    t += 2 * (lin_profile.units[u].forward_s + lin_profile.units[u].backward_s);
  // the message at the stage's edge: 2 · 512 · 1024 bf16 values, over NVLink (both stages in a node) at
  // the 200 GB/s published nccl-tests runs sustain (hw::a100_nvlink_efficiency of 300)
  return t + (2.0 * 512 * 1024 * 2) / 200e9 + step_lat + call_lat;
}
constexpr double slowest = stage_time(1) > stage_time(0) ? stage_time(1) : stage_time(0);
constexpr double update = 2 * (1024.0 * 1024 + 1024) * (7 * 4 + 2) / (2039e9 * 0.90);  // a stage's Adam, HBM-bound
static_assert(near(pp2_e.step_s, (8 + 2 - 1) * slowest + update));
static_assert(near(pp2_e.bubble_s, slowest) && pp2_e.data_comm_s == 0);
// MFU = model FLOPs / (step · devices · peak); the model FLOPs are the four Linears' and the loss's
static_assert(near(pp2_e.mfu, pp2_e.model_flops / (pp2_e.step_s * 2 * 312e12)));
// ZB-H1: M · slowest + (p − 1) · (slowest − 2 W) + update, W a stage's weight-gradient
// passes: each Linear's wgrad GEMM (dW = Xᵀ dY)
static_assert(near(lin_profile.units[0].weight_s, lin_wgrad));
constexpr cost::parallel_config pp2_zb{.tensor = 1, .pipeline = 2, .data = 1, .micro_batch = 2, .micro_batches = 8,
                                       .schedule = cost::price_of<ZeroBubbleH1>};
constexpr cost::step_estimate zb_e = cost::estimate<4, 2>(lin_profile, halves, pp2_zb, A100);
constexpr int slow_stage = stage_time(1) > stage_time(0) ? 1 : 0;
constexpr double slow_w = 2 * (lin_profile.units[2 * slow_stage].weight_s + lin_profile.units[2 * slow_stage + 1].weight_s);
static_assert(near(zb_e.step_s, 8 * slowest + (slowest - 2 * slow_w) + update));
static_assert(zb_e.step_s < pp2_e.step_s);
// every stage keeps p = 2 micro-batches and each Linear's output gradient (2 · 512 · 1024 bf16)
static_assert(zb_e.memory_bytes > pp2_e.memory_bytes);
// Interleaved 1F1B over 4 parts on 2 stages (stage s runs units s and s + 2): the step is
// (M + (p − 1) / V) · the slowest stage + update, the stage counting both its parts' edges.
constexpr cost::parallel_config pp2_i2{.tensor = 1, .pipeline = 2, .data = 1, .micro_batch = 2, .micro_batches = 8,
                                       .schedule = cost::price_of<Interleaved<2>>};
constexpr cost::step_estimate i2_e = cost::estimate<4, 4>(lin_profile, std::array<int, 5>{0, 1, 2, 3, 4}, pp2_i2, A100);
constexpr double i2_stage_time(int s) {
  double t = 0;
  for (int u : {s, s + 2}) t += 2 * (lin_profile.units[u].forward_s + lin_profile.units[u].backward_s);
  const double msg = (2.0 * 512 * 1024 * 2) / 200e9 + step_lat + call_lat;  // one edge, one direction
  return t + 3 * msg;  // three edges each: stage 0 part 0's out, part 2's in and out; stage 1 the mirror
}
constexpr double i2_slowest = i2_stage_time(1) > i2_stage_time(0) ? i2_stage_time(1) : i2_stage_time(0);
static_assert(near(i2_e.step_s, (8 + 0.5) * i2_slowest + update));
static_assert(near(i2_e.bubble_s, i2_slowest / 2));
// Data parallel: a ring all-reduce of each device's fp32 gradients over 4 devices of one node
constexpr cost::parallel_config dp4{.tensor = 1, .pipeline = 1, .data = 4, .micro_batch = 1, .micro_batches = 1};
constexpr cost::step_estimate dp4_e = cost::estimate<4, 1>(lin_profile, std::array<int, 2>{0, 4}, dp4, A100);
static_assert(near(dp4_e.data_comm_s, 2 * 0.75 * (4 * (1024.0 * 1024 + 1024) * 4) / 200e9 + 2 * 3 * step_lat + call_lat));
// A runtime that adds each micro-batch's weight gradients to the fp32 accumulator in a pass
// of its own (hardware::accumulate_grads = every, Megatron-LM's local DDP hook) pays, per
// micro-batch whatever its size, a read and a write of 4 bytes and a read of the 2-byte
// gradient per parameter at 90% of 2039 GB/s; it is part of backward and of W.
constexpr hardware A100_separate = [] {
  hardware h = A100;
  h.accumulate_grads = grad_accumulation::every;
  return h;
}();
constexpr auto acc_profile = cost::profile_of<LinProbe, 4>(std::array<int, 5>{0, 1, 2, 3, 4}, A100_separate);
constexpr double acc_s = (1024.0 * 1024 + 1024) * (2 * 4 + 2) / (2039e9 * 0.90);
static_assert(LinProbe::master_bytes == 4 && near(acc_profile.units[0].accumulate_s, acc_s));
static_assert(lin_profile.units[0].accumulate_s == 0 && acc_profile.units[0].backward_s == lin_profile.units[0].backward_s);
constexpr cost::step_estimate acc_e = cost::estimate<4, 2>(acc_profile, halves, pp2, A100_separate);
static_assert(near(acc_e.accumulate_s, 8 * 2 * acc_s) && near(acc_e.step_s, pp2_e.step_s + (8 + 2 - 1) * 2 * acc_s));
constexpr cost::parallel_config pp2_mb4{.tensor = 1, .pipeline = 2, .data = 1, .micro_batch = 4, .micro_batches = 8};
static_assert(near(cost::estimate<4, 2>(acc_profile, halves, pp2_mb4, A100_separate).accumulate_s, 8 * 2 * acc_s));
static_assert(near(cost::estimate<4, 2>(acc_profile, halves, pp2_zb, A100_separate).step_s,
                   8 * (slowest + 2 * acc_s) + (slowest + 2 * acc_s - 2 * (slow_w + 2 * acc_s)) + update));

// PyTorch's DDP: fp16 gradients (grad_bytes 2) accumulated by autograd — a pass of 2 + 2 + 2
// bytes per parameter on every micro-batch but the first — and all-reduced in buckets while the
// last micro-batch's backward runs: each bucket pays its latencies, and what shows is what
// outlasts that backward, at least the last bucket's all-reduce.
constexpr hardware A100_torch_ddp = [] {
  hardware h = A100;
  h.accumulate_grads = grad_accumulation::after_first;
  h.grad_bytes = 2;
  h.grad_bucket_bytes = 1 << 20;
  return h;
}();
constexpr auto ddp_profile = cost::profile_of<LinProbe, 4>(std::array<int, 5>{0, 1, 2, 3, 4}, A100_torch_ddp);
constexpr double acc16_s = (1024.0 * 1024 + 1024) * (2 + 2 + 2) / (2039e9 * 0.90);
static_assert(near(ddp_profile.units[0].accumulate_s, acc16_s));
// micro-batches of 8 (the probe's 1 scaled), 8 of them
constexpr cost::parallel_config dp4_m8{.tensor = 1, .pipeline = 1, .data = 4, .micro_batch = 8, .micro_batches = 8};
constexpr std::array<int, 2> whole{0, 4};
constexpr cost::step_estimate ddp_e = cost::estimate<4, 1>(ddp_profile, whole, dp4_m8, A100_torch_ddp);
constexpr double per_mb(bool forward) {  // one micro-batch's forward or backward over the four Linears
  double t = 0;
  for (const auto& u : ddp_profile.units) t += 8 * (forward ? u.forward_s : u.backward_s);
  return t;
}
static_assert(near(ddp_e.accumulate_s, 7 * 4 * acc16_s));
static_assert(near(ddp_e.compute_s, 8 * (per_mb(true) + per_mb(false)) + 7 * 4 * acc16_s));
// the fp16 gradients, 4 · 1,049,600 · 2 = 8,396,800 bytes, over 4 devices of a node: whole, or
// in 9 buckets of 1 MiB or less
constexpr double grads16 = 4 * (1024.0 * 1024 + 1024) * 2;
constexpr double ddp_ring(double bytes, double rate) { return 2 * 0.75 * bytes / rate + 2 * 3 * step_lat + call_lat; }
constexpr double ddp_ar = ddp_ring(grads16, 200e9), ddp_last = ddp_ring(1 << 20, 200e9);
constexpr double ddp_bucketed = 9 * ddp_ring(grads16 / 9, 200e9);
constexpr double ddp_window = per_mb(false) + 4 * acc16_s;  // the last micro-batch's backward and its accumulation
static_assert(ddp_bucketed - ddp_window < ddp_last && near(ddp_e.data_comm_s, ddp_last));  // hidden but the last bucket
// on links 20 times slower the all-reduce outlasts the backward
constexpr hardware A100_torch_ddp_slow = [] {
  hardware h = A100_torch_ddp;
  h.intra_efficiency /= 20;
  return h;
}();
constexpr double slow_bucketed = 9 * ddp_ring(grads16 / 9, 10e9);
static_assert(slow_bucketed - ddp_window > ddp_ring(1 << 20, 10e9));
static_assert(near(cost::estimate<4, 1>(ddp_profile, whole, dp4_m8, A100_torch_ddp_slow).data_comm_s,
                   slow_bucketed - ddp_window));
// one micro-batch: no accumulation pass runs, none in the backward the all-reduce hides behind
constexpr cost::parallel_config dp4_m1{.tensor = 1, .pipeline = 1, .data = 4, .micro_batch = 8, .micro_batches = 1};
static_assert(near(cost::estimate<4, 1>(ddp_profile, whole, dp4_m1, A100_torch_ddp_slow).data_comm_s,
                   slow_bucketed - per_mb(false)));
static_assert(cost::estimate<4, 1>(ddp_profile, whole, dp4_m1, A100_torch_ddp).accumulate_s == 0);
// with a pipeline the reduction runs after the backward (PyTorch's DDP reduces after every
// micro-batch there): the whole all-reduce
constexpr cost::parallel_config pp2_dp2{.tensor = 1, .pipeline = 2, .data = 2, .micro_batch = 8, .micro_batches = 8};
static_assert(cost::estimate<4, 2>(ddp_profile, halves, pp2_dp2, A100_torch_ddp).data_comm_s ==
              cost::estimate<4, 2>(ddp_profile, halves, pp2_dp2, [] {
                hardware h = A100_torch_ddp;
                h.grad_bucket_bytes = 0;
                return h;
              }()).data_comm_s);
// after the backward (Megatron-LM's local DDP, strata): the whole all-reduce, in grad_bytes
constexpr hardware A100_local_ddp = [] {
  hardware h = A100;
  h.accumulate_grads = grad_accumulation::every;
  h.grad_bytes = 2;
  return h;
}();
constexpr auto local_profile = cost::profile_of<LinProbe, 4>(std::array<int, 5>{0, 1, 2, 3, 4}, A100_local_ddp);
static_assert(near(cost::estimate<4, 1>(local_profile, whole, dp4_m8, A100_local_ddp).data_comm_s, ddp_ar));

// ZeRO-3 over the same 4 devices: each unit (here each Linear) a TaskGraph whose weights are
// all-gathered in fp32 before its forward and its backward, inside every micro-batch; the
// gradients reduce-scattered after every micro-batch and no all-gather after the update.
constexpr cost::parallel_config dp4_z3{.tensor = 1, .pipeline = 1, .data = 4, .micro_batch = 1, .micro_batches = 2,
                                       .zero = 3};
constexpr cost::step_estimate z3_e = cost::estimate<4, 1>(lin_profile, std::array<int, 2>{0, 4}, dp4_z3, A100);
constexpr double lin_n = 1024.0 * 1024 + 1024, all4 = 4 * lin_n * 4;  // the stage's parameters in fp32 bytes
constexpr double ring4 = 0.75 * all4 / 200e9 + 3 * step_lat + call_lat;  // one all-gather or reduce-scatter of them
constexpr double z3_stage = [] {
  double t = 0;
  for (int u = 0; u < 4; ++u) t += lin_profile.units[u].forward_s + lin_profile.units[u].backward_s;
  return t;
}();
static_assert(near(z3_e.data_comm_s, 2 * (ring4 + 2 * ring4)));
static_assert(near(z3_e.step_s, 2 * (z3_stage + 2 * ring4) + 2 * ring4 + lin_n * (7 * 4 + 2) / (2039e9 * 0.90)));
// memory: 4 bytes a parameter (the fp32 chunks of masters, gradients and two moments: 16 / 4)
// instead of 18 (bf16 copy, fp32 master, gradient, moments), plus the largest unit's two bf16
// staging slots, its fp32 landing slot and two fp32 gradient slots (16 bytes a parameter)
constexpr cost::parallel_config dp4_z0{.tensor = 1, .pipeline = 1, .data = 4, .micro_batch = 1, .micro_batches = 2};
constexpr cost::step_estimate z0_e = cost::estimate<4, 1>(lin_profile, std::array<int, 2>{0, 4}, dp4_z0, A100);
static_assert(LinProbe::mixed_precision && lin_profile.mixed);
static_assert(z0_e.memory_bytes - z3_e.memory_bytes == static_cast<long long>(4 * lin_n * (18 - 4) - 16 * lin_n));

// ---- the bisection cut against a brute force --------------------------------------------
template <std::size_t N, std::size_t K>
constexpr long long brute_bottleneck(const detail::unit_costs<N>& u) {
  long long best = 0x7fffffffffffffffLL;
  for (unsigned mask = 0; mask < (1u << (N - 1)); ++mask) {
    if (static_cast<std::size_t>(__builtin_popcount(mask)) != K - 1) continue;
    long long worst = 0, run = 0;
    for (std::size_t i = 0; i < N; ++i) {
      if (i > 0 && (mask & (1u << (i - 1)))) worst = run > worst ? run : worst, run = 0;
      run += u.cost[i];
    }
    worst = run > worst ? run : worst;
    best = worst < best ? worst : best;
  }
  return best;
}
template <std::size_t N, std::size_t K>
constexpr bool bisection_agrees(unsigned seed) {
  detail::unit_costs<N> u{};
  unsigned x = seed;
  for (std::size_t i = 0; i < N; ++i) {
    x = x * 1103515245u + 12345u;
    u.cost[i] = 1 + static_cast<long long>((x >> 8) % 1000);
  }
  const auto r = detail::balanced_cut<N, K>(u);
  for (std::size_t k = 0; k < K; ++k)
    if (r.cuts[k] >= r.cuts[k + 1]) return false;
  return r.fits && r.cuts[0] == 0 && r.cuts[K] == static_cast<int>(N) && r.bottleneck == brute_bottleneck<N, K>(u) &&
         r.bottleneck == detail::best_cut(u, std::array<long long, K>{}, 0).bottleneck;
}
static_assert(bisection_agrees<8, 3>(1) && bisection_agrees<8, 3>(2) && bisection_agrees<8, 3>(3));
static_assert(bisection_agrees<10, 4>(4) && bisection_agrees<10, 4>(5) && bisection_agrees<10, 7>(6));
static_assert(bisection_agrees<9, 9>(7) && bisection_agrees<9, 1>(8) && bisection_agrees<12, 5>(9));

// ---- the search ---------------------------------------------------------------------------
constexpr int V = 64, S = 16, D = 32, H = 4;
using Attn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>;
using MLP = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;
using GPT = Model<Embedding<V, D>, PositionEmbedding<S, D>, Repeat<4, Attn, MLP>, LayerNorm<D>, Linear<D, V>>;
using Found = Search<GPT, 8, 64, 64, hw::A100_80GB, TensorDegrees<1, 2, 4>, Input<S>, Loss<SoftmaxCrossEntropy>,
                     Element<bf16>>;

// every (t, p, b, ZeRO, SP, recompute) the description allows, counted by hand:
// t = 1: p in {1, 2, 4, 8}, recompute on/off; t = 2: p in {1, 2, 4}, t = 4: p in {1, 2}, with
// SP on/off too; b in {1, 2, 4, 8} (64 / (d · b) whole); ZeRO 0-3 where d > 1, else 0;
// with p > 1, no recompute and ZeRO 0-1, ZB-H1 as well as 1F1B; and with p > 1, 2p parts
// to cut and M = 64 / (d · b) a multiple of p, interleaved 1F1B (two chunks) at ZeRO 0-2.
constexpr int units = Found::probe<1, false, false>::num_units;
static_assert(units == 12);  // embedding, position embedding, 4 × (attention block, MLP block), LayerNorm, head
constexpr int by_hand = [] {
  int n = 0;
  for (int t : {1, 2, 4})
    for (int p = 1; p <= 8 / t; p *= 2) {
      const int d = 8 / (t * p), variants = t == 1 ? 2 : 4, no_recompute = variants / 2;
      for (int b : {1, 2, 4, 8}) {
        if (64 % (d * b) != 0) continue;
        n += variants * (d > 1 ? 4 : 1) + (p > 1 ? no_recompute * (d > 1 ? 2 : 1) : 0);
        if (p > 1 && 2 * p <= units && (64 / (d * b)) % p == 0) n += variants * (d > 1 ? 3 : 1);
      }
    }
  return n;
}();
static_assert(Found::all.tried == by_hand);

// the choice is the fastest of every configuration that fits
constexpr bool best_is_fastest = [] {
  for (int i = 0; i < Found::all.size; ++i) {
    const candidate& c = Found::all.rows[static_cast<std::size_t>(i)];
    if (c.fits && c.estimate.step_s < Found::best.estimate.step_s) return false;
  }
  return Found::best.fits;
}();
static_assert(best_is_fastest);
static_assert(Found::num_ranked == Found::keep);
static_assert(Found::ranked[1].estimate.step_s >= Found::ranked[0].estimate.step_s &&
              Found::ranked[7].estimate.step_s >= Found::ranked[6].estimate.step_s);

// the plan: the chosen degrees, valid, and within the budget by the lowered plan's own count
using Chosen = Found::plan;
static_assert(Chosen::valid && Chosen::deadlock_free);
static_assert(Chosen::part_devices == Found::best.tensor && Chosen::stages == Found::best.pipeline);
static_assert(Chosen::data_parallel() == Found::best.data);
static_assert(Chosen::micro_batch == Found::best.micro_batch && Chosen::num_micro_batch == Found::best.micro_batches);
static_assert(Chosen::zero == Found::best.zero && Chosen::sequence_parallel == Found::best.sequence_parallel);
static_assert(Chosen::split_backward == Found::best.zero_bubble && Chosen::chunks == Found::best.chunks);
static_assert(Chosen::num_parts == Found::best.pipeline * Found::best.chunks);
constexpr bool fits_exactly = [] {
  for (int s = 0; s < Chosen::stages; ++s)
    if (Chosen::peak_memory_bytes(s, Chosen::data_parallel()) > Found::best.estimate.memory_bytes) return false;
  return true;
}();
static_assert(fits_exactly);

// Any configuration tried is a plan too: the 8-way data-parallel ZeRO-3 one (micro-batch 2,
// no recomputation) is a Colocate of 12 TaskGraphs, one per unit, whose lowered memory is
// within its estimate, and whose all-gathers (the communication analysis, counting the
// two slots' hits as the executor does) move at most the estimate's 2 · M · parameters:
// at least all but four units' worth per micro-batch.
constexpr int z3_index = [] {
  for (int i = 0; i < Found::all.size; ++i) {
    const candidate& c = Found::all.rows[static_cast<std::size_t>(i)];
    if (c.zero == 3 && c.tensor == 1 && c.pipeline == 1 && c.micro_batch == 2 && !c.recompute) return i;
  }
  return -1;
}();
static_assert(z3_index >= 0 && Found::all.rows[z3_index].data == 8 && Found::all.rows[z3_index].fits);
using Z3 = Found::plan_of_candidate<z3_index>;
static_assert(Z3::valid && Z3::deadlock_free && Z3::zero == 3 && Z3::num_taskgraphs == units && Z3::staged_weights);
static_assert(Z3::data_parallel() == 8 && Z3::num_micro_batch == 4 && Z3::micro_batch == 2);
static_assert(Z3::peak_memory_bytes(0, 8) <= Found::all.rows[z3_index].estimate.memory_bytes);
constexpr long long z3_gathered = [] {
  const auto t = Z3::communication(0, 8);
  long long b = 0;
  for (int i = 0; i < t.size; ++i)
    if (t.rows[static_cast<std::size_t>(i)].kind == collective::all_gather) b += t.rows[static_cast<std::size_t>(i)].bytes;
  return b;
}();
constexpr long long z3_params = Z3::stage_param_elems(0);
static_assert(z3_gathered <= 2 * 4 * z3_params * 4 && 10 * z3_gathered >= 9 * (2 * 4 * z3_params * 4));

// a budget that excludes the unsplit configurations changes the answer
using Tight = Search<GPT, 8, 1, 64, hw::A100_80GB, TensorDegrees<1, 2, 4>, Input<S>, Loss<SoftmaxCrossEntropy>,
                     Element<bf16>>;
static_assert(Tight::found && Tight::all.fitting < Found::all.fitting);
static_assert(Tight::best.estimate.memory_bytes <= (1 << 20));

// A budget that only recomputed plans meet: ZB-H1 is out (no recomputation), and with 16
// micro-batches interleaving two chunks per stage beats 1F1B's bubble; the chosen plan is
// an interleaved Pipeline of 8 parts whose lowered memory fits the estimate.
constexpr int V2 = 8192, S2 = 256, D2 = 512, H2 = 8;
using Attn2 = Residual<LayerNorm<D2>, CausalSelfAttention<D2, H2, S2>>;
using MLP2 = Residual<LayerNorm<D2>, Linear<D2, 4 * D2>, GeLU, Linear<4 * D2, D2>>;
using GPT2 = Model<Embedding<V2, D2>, PositionEmbedding<S2, D2>, Repeat<8, Attn2, MLP2>, LayerNorm<D2>, Linear<D2, V2>>;
using Interleave = Search<GPT2, 4, 240, 16, hw::A100_80GB, TensorDegrees<1>, Input<S2>, Loss<SoftmaxCrossEntropy>,
                          Element<bf16>>;
using ChosenI = Interleave::plan;
static_assert(Interleave::best.chunks == 2 && Interleave::best.recompute && Interleave::best.pipeline == 4);
static_assert(ChosenI::valid && ChosenI::chunks == 2 && ChosenI::num_parts == 8 && ChosenI::stages == 4);
constexpr bool interleaved_fits = [] {
  for (int s = 0; s < ChosenI::stages; ++s)
    if (ChosenI::peak_memory_bytes(s, ChosenI::data_parallel()) > Interleave::best.estimate.memory_bytes) return false;
  return true;
}();
static_assert(interleaved_fits);

// ---- a repeated block probed as four copies (plan/search_probe.hpp) -----------------------
// Six blocks probed as four price every unit as the probe of the whole model does, to the
// last bit, in every (t, SP, RC) the search probes; a block whose copies are entered unlike
// (Linear, ReLU under Split<2>: column and row cuts alternate, a period of two copies) is
// probed whole.
using GPT6 = Model<Embedding<V, D>, PositionEmbedding<S, D>, Repeat<6, Attn, MLP>, LayerNorm<D>, Linear<D, V>>;
template <int t, bool SP, bool RC>
using Probe6 = detail::search_probe<GPT6, t, SP, RC, hw::A100_80GB, Input<S>, Loss<SoftmaxCrossEntropy>, Element<bf16>>;
template <class Pr>
constexpr bool priced_as_whole() {
  const auto a = Pr::profile;
  const auto b = cost::profile_of<typename Pr::template probe_on<typename Pr::units>, Pr::NU>(Pr::first, A100);
  for (std::size_t u = 0; u < Pr::NU; ++u) {
    const cost::unit_time &x = a.units[u], &y = b.units[u];
    if (!(x.forward_s == y.forward_s && x.backward_s == y.backward_s && x.recompute_s == y.recompute_s &&
          x.tensor_comm_s == y.tensor_comm_s && x.forward_comm_s == y.forward_comm_s && x.model_flops == y.model_flops &&
          x.local_params == y.local_params && x.weight_s == y.weight_s && x.keep_bytes == y.keep_bytes &&
          x.accumulate_s == y.accumulate_s))
      return false;
    const auto &m = a.memory, &n = b.memory;
    if (!(m.cost[u] == n.cost[u] && m.state[u] == n.state[u] && m.act[u] == n.act[u] && m.ping[u] == n.ping[u] &&
          m.scratch[u] == n.scratch[u] && m.scratch_stats[u] == n.scratch_stats[u] &&
          m.recompute[u] == n.recompute[u] && m.recompute_stats[u] == n.recompute_stats[u] &&
          m.entry[u] == n.entry[u] && m.exit[u] == n.exit[u]))
      return false;
  }
  return a.num_units == b.num_units && a.micro_batch == b.micro_batch && a.tensor == b.tensor &&
         a.element_bytes == b.element_bytes && a.master_bytes == b.master_bytes && a.peak_flops == b.peak_flops &&
         a.mixed == b.mixed;
}
static_assert(Probe6<1, false, false>::NP == 2 + 4 * 2 + 2 && Probe6<1, false, false>::NU == 2 + 6 * 2 + 2);
static_assert(Probe6<1, false, false>::shortened && priced_as_whole<Probe6<1, false, false>>());
static_assert(Probe6<1, false, true>::shortened && priced_as_whole<Probe6<1, false, true>>());
static_assert(Probe6<2, false, false>::shortened && priced_as_whole<Probe6<2, false, false>>());
static_assert(Probe6<2, true, true>::shortened && priced_as_whole<Probe6<2, true, true>>());
static_assert(Probe6<4, true, false>::shortened && priced_as_whole<Probe6<4, true, false>>());
using Alternating = Model<Repeat<5, Linear<64, 64>, ReLU>, Linear<64, 10>>;
using AltProbe = detail::search_probe<Alternating, 2, false, false, hw::A100_80GB, Input<16, 64>, Loss<SoftmaxCrossEntropy>>;
static_assert(!AltProbe::shortened && priced_as_whole<AltProbe>());
static_assert(detail::search_probe<Alternating, 1, false, false, hw::A100_80GB, Input<16, 64>,
                                   Loss<SoftmaxCrossEntropy>>::shortened);

}  // namespace

int main() {
  std::printf("ZeRO-3 candidate: all-gathers move %lld bytes a step, the estimate's bound %lld\n", z3_gathered,
              2 * 4 * z3_params * 4);
  Found::print_ranked();
  Tight::print_ranked();
  Interleave::print_ranked();
  return 0;
}
