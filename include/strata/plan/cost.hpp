#pragma once
// The planner's step-time model: how long one training step of a plan takes on a
// hardware description (plan/hardware.hpp), from the planner's own analyses.
//
// A probe plan (the model on one stage, plan/auto_stages.hpp) gives every layer call of
// one device and micro-batch: its FLOPs (layer_plans[i].local_flops_per_sample), the
// bytes it touches (its input, output, stash, scratch, backward values and weights, from
// the lowered buffer plan) and its tensor-parallel collectives (layer_plans[i].comms). A call whose
// description gives GEMMs (layer_desc::gemms: a Linear's, an attention's) is timed GEMM by
// GEMM (gemm_s: tile and wave quantization over the SMs, a
// roofline per GEMM) plus, for materialized attention, the elementwise passes over its
// score tensor; any other call takes max(FLOPs / (peak · gemm_efficiency), bytes / sustained
// HBM) forward and the same with twice the bytes backward (a view: nothing where it runs no
// kernel); a recomputed call's forward runs
// twice; where the runtime adds each micro-batch's weight gradients to their accumulator in
// a pass of its own (hardware::accumulate_grads), that pass is charged per micro-batch (or
// per micro-batch after the first) at the HBM rate. Collectives take the ring time of their
// size over the link they cross (NVLink inside a node, the network between nodes, each at the
// fraction of its rate published nccl-tests runs sustain) plus NCCL's latencies, one per call
// and one per ring step. A stage's time per micro-batch is the sum over its units plus the pipeline messages
// at its edges; the step is
//   M · slowest stage + the schedule's bubble (its tag's bubble():
//     (p − 1) / V · slowest for 1F1B, GPipe, interleaved with V chunks;
//     (p − 1) · (slowest − 2 W) for ZB-H1, W its weight-gradient passes)
//   + the data-parallel gradient all-reduce (after the backward; where the runtime reduces in
//     buckets during the last micro-batch's backward, hardware::grad_bucket_bytes, only what
//     outlasts that backward, and at least the last bucket) + the optimizer update
// (ZeRO-3: each unit's weights all-gathered twice per micro-batch, inside the stage's time)
// and MFU = model FLOPs (forward + backward, no recomputation) / (step · devices · peak).
#include <array>
#include <concepts>
#include <cstddef>

#include "strata/core/sbp.hpp"
#include "strata/plan/auto_stages.hpp"
#include "strata/plan/hardware.hpp"
#include "strata/plan/lower/tables.hpp"
#include "strata/plan/partition.hpp"
#include "strata/plan/schedule_traits.hpp"
#include "strata/plan/schedules/one_f_one_b.hpp"

namespace strata::cost {

// What a large NCCL transfer sustains over NVLink (inside a node) and a network adapter.
constexpr double intra_rate(const hardware& hw) { return hw.intra_bytes_per_s * hw.intra_efficiency; }
constexpr double inter_rate(const hardware& hw) { return hw.inter_bytes_per_s * hw.inter_efficiency; }

// The link a group's collectives cross, as the model prices it: its sustained rate, the
// latency of a ring step over it, the fixed latency of a call, and the rate a
// point-to-point message sustains (0: the collectives').
struct link_price {
  double bytes_per_s = 0, step_s = 0, call_s = 0, p2p_bytes_per_s = 0;
};
constexpr link_price link_of(const hardware& hw, bool intra) {
  const double raw = intra ? hw.intra_bytes_per_s : hw.inter_bytes_per_s;
  const double p2p = hw.p2p_efficiency > 0 ? raw * hw.p2p_efficiency : 0;
  return intra ? link_price{intra_rate(hw), hw.intra_latency_s, hw.collective_latency_s, p2p}
               : link_price{inter_rate(hw), hw.inter_latency_s, hw.collective_latency_s, p2p};
}

// Ring time of a collective moving `bytes` (the larger local buffer) over n devices: NCCL's
// own model (src/graph/tuning.cc), a fixed latency per call and one per ring step added to
// the bytes' time at the link's rate; a send is one step.
constexpr double collective_s(collective k, double bytes, int n, const link_price& l) {
  const double bw = l.bytes_per_s, lat = l.step_s, call = l.call_s;
  if (n <= 1 || bytes <= 0 || bw <= 0) return 0;
  const double f = static_cast<double>(n - 1) / n;
  switch (k) {
    case collective::all_reduce: return 2 * f * bytes / bw + 2 * (n - 1) * lat + call;
    case collective::all_gather:
    case collective::reduce_scatter:
    case collective::all_to_all:
    case collective::broadcast: return f * bytes / bw + (n - 1) * lat + call;
    case collective::send_recv: return bytes / (l.p2p_bytes_per_s > 0 ? l.p2p_bytes_per_s : bw) + lat + call;
    case collective::none: return 0;
  }
  return 0;
}

// collective_s solved for a link measured as nccl-tests measures it (runtime/calibrate.hpp):
// the call latency and the fraction of the link's rate under which an all-reduce over 2
// devices (2 ring steps of `step_s`, the bytes once at rate · efficiency, one call) takes
// `small_s` for one float and `large_s` for `bytes`; call ≥ 0, 0 < efficiency ≤ 1.
struct all_reduce_fit {
  double call_s = 0, efficiency = 1;
};
constexpr all_reduce_fit fit_all_reduce(double small_s, double large_s, double bytes, double rate, double step_s) {
  all_reduce_fit f{};
  if (rate <= 0 || bytes <= 4 || large_s <= small_s) return f;
  // the two equations: t = b / (rate · efficiency) + 2 · step_s + call_s at b = 4 and `bytes`
  double per_byte = (large_s - small_s) / (bytes - 4);
  f.call_s = small_s - 2 * step_s - 4 * per_byte;
  if (f.call_s < 0) {  // latency-bound below the ring's steps: all the rest is the bytes'
    f.call_s = 0;
    per_byte = (large_s - 2 * step_s) / bytes;
  }
  f.efficiency = per_byte > 0 ? 1 / (rate * per_byte) : 1;
  if (f.efficiency > 1) f.efficiency = 1;
  return f;
}

// One GEMM (or `items` independent ones of the same shape, a batched call): C[m, n] = A[m, k]
// B[k, n] in elements of `eb` bytes. Each candidate output tile of hw.gemm_tiles tiles C
// (items · ⌈m/bm⌉ · ⌈n/bn⌉ tiles) and runs them in waves of sm_count; compute takes the
// FLOPs at peak · gemm_efficiency over the share of the waves' tile area that is useful
// (tile and wave quantization); memory takes the compulsory bytes (A, B and C once) at the
// rate a GEMM kernel streams HBM (hardware::gemm_hbm_efficiency: measured, about half a
// copy's, with as few tiles as SMs or many).
// A tile takes the larger of the two; the fastest candidate is taken, as cuBLAS's heuristic
// would.
constexpr double gemm_s(double items, double m, double n, double k, double eb, double peak, const hardware& hw) {
  if (items <= 0 || m <= 0 || n <= 0 || k <= 0) return 0;
  const double flops = 2 * items * m * n * k, bytes = items * (m * k + k * n + m * n) * eb;
  const double sms = hw.sm_count > 0 ? hw.sm_count : 1;
  const double stream = hw.gemm_hbm_efficiency > 0 ? hw.gemm_hbm_efficiency : hw.hbm_efficiency;
  double best = -1;
  for (const auto& tile : hw.gemm_tiles) {
    const double bm = tile[0], bn = tile[1];
    if (bm <= 0 || bn <= 0) continue;
    const double tiles = items * static_cast<double>(static_cast<long long>((m + bm - 1) / bm)) *
                         static_cast<double>(static_cast<long long>((n + bn - 1) / bn));
    const double waves = static_cast<double>(static_cast<long long>((tiles + sms - 1) / sms));
    const double useful = items * m * n / (waves * sms * bm * bn);
    const double tc = flops / (peak * hw.gemm_efficiency * useful);
    const double tm = bytes / (hw.hbm_bytes_per_s * stream);
    const double t = tc > tm ? tc : tm;
    best = best < 0 || t < best ? t : best;
  }
  return best < 0 ? flops / (peak * hw.gemm_efficiency) : best;
}

// A GEMM's forward and its two backward products: dA = dC Bᵀ [m, k] and dB = Aᵀ dC [k, n];
// `weight`: the part of backward a zero-bubble W runs (dB when B is a weight).
struct pass_s {
  double forward = 0, backward = 0, weight = 0;
};
constexpr pass_s gemm_pair_s(double items, double m, double n, double k, double eb, double peak,
                             const hardware& hw) {
  const double db = gemm_s(items, k, n, m, eb, peak, hw);
  return {gemm_s(items, m, n, k, eb, peak, hw), gemm_s(items, m, k, n, eb, peak, hw) + db, db};
}
// the same for a product of two activations (attention's scores): nothing for W
constexpr pass_s activation_pair_s(double items, double m, double n, double k, double eb, double peak,
                                   const hardware& hw) {
  pass_s p = gemm_pair_s(items, m, n, k, eb, peak, hw);
  p.weight = 0;
  return p;
}

// A layer call made of GEMMs, timed GEMM by GEMM (they run one after another, so their
// times add): the shapes its description gives (a Linear's one product; the attention's
// projections and its core: the score products and the memory-bound passes over the score
// tensor between them, or one fused kernel). A call without GEMMs (and any call under the
// mesh tensor modes): {-1, -1}, the caller falls back to the per-call roofline.
constexpr pass_s gemm_layer_s(const call_gemms& cg, const local_dims& d, double eb, double peak, const hardware& hw) {
  if (d.q > 0 || !cg.timed()) return {-1, -1};
  pass_s t{};
  auto add = [&t](pass_s x) { t.forward += x.forward, t.backward += x.backward, t.weight += x.weight; };
  for (int i = 0; i < cg.num_gemms; ++i) {
    const gemm_shape& g = cg.gemm[static_cast<std::size_t>(i)];
    add(g.weight ? gemm_pair_s(g.items, g.m, g.n, g.k, eb, peak, hw)
                 : activation_pair_s(g.items, g.m, g.n, g.k, eb, peak, hw));
  }
  const score_shape& a = cg.scores;
  if (a.items <= 0) return t;
  const double items = a.items, seq = a.seq, dh = a.head_dim;
  if (hw.attention == attention_kernels::flash) {
    // one fused kernel: the score products' FLOPs only (nothing [s, s] reaches HBM); its
    // backward recomputes q kᵀ
    const double f = 2 * items * seq * seq * dh / (peak * hw.gemm_efficiency);
    t.forward += 2 * f, t.backward += 5 * f;
    return t;
  }
  add(activation_pair_s(items, seq, seq, dh, eb, peak, hw));  // scores = q kᵀ
  add(activation_pair_s(items, seq, dh, seq, eb, peak, hw));  // context = probabilities · v
  // elementwise passes over the score tensor, in units of its size: the softmax reads the
  // scores and writes the probabilities (2), its backward reads the probabilities and their
  // gradient and writes the scores' (3); dropout reads and writes once and writes a 1-byte
  // mask forward, reads gradient and mask and writes backward (2 + 1/eb each way)
  const double scores = items * seq * seq * eb, rate = hw.hbm_bytes_per_s * hw.hbm_efficiency;
  const double drop = hw.attention_dropout ? 2 + 1 / eb : 0;
  t.forward += (2 + drop) * scores / rate;
  t.backward += (3 + drop) * scores / rate;
  return t;
}

// One unit's time on one device for one micro-batch of the probe's size.
struct unit_time {
  double forward_s = 0, backward_s = 0, recompute_s = 0;  // compute (roofline per layer call)
  double tensor_comm_s = 0;                               // its tensor-parallel collectives
  double forward_comm_s = 0;  // the forward's collectives, once (a recomputation's run in the backward)
  double model_flops = 0;   // forward + backward FLOPs of the whole layer per sample (no split, no recompute)
  double local_params = 0;  // parameter elements on one device
  // zero-bubble: the part of backward_s its W passes take, and the bytes B keeps for them
  double weight_s = 0, keep_bytes = 0;
  // per micro-batch whatever its size: the separate pass adding its weight gradients to the
  // accumulator (hardware::accumulate_grads), part of backward and of W
  double accumulate_s = 0;
  // A view at a part's edge copies (plan/lower/parts.hpp): its output in forward when it is
  // the unit's last layer and the part ends there, its input gradient in backward when it is
  // the first and the part starts there
  double edge_out_s = 0, edge_in_s = 0;
  // a row split gathered again (layer_call::regather): once more before W where a schedule
  // splits the backward
  double regather_s = 0;
};

template <std::size_t N>
struct profile {
  std::array<unit_time, N> units{};
  detail::unit_costs<N> memory{};  // plan/partition.hpp's per-unit memory (probe micro-batch)
  int num_units = 0;
  int micro_batch = 1;  // the probe's
  int tensor = 1;       // devices of its Split (1: Replicate)
  double element_bytes = 4, master_bytes = 4, peak_flops = 0;  // peak for the plan's element type
  bool mixed = false;  // compute-type copies of fp32 masters (bf16/fp16 elements)
};

// The profile of a probe plan whose units start at first[u].
template <class Probe, std::size_t N>
constexpr profile<N> profile_of(const std::array<int, N + 1>& first, const hardware& hw) {
  profile<N> r{};
  r.num_units = static_cast<int>(N);
  r.micro_batch = Probe::micro_batch;
  r.tensor = Probe::part_devices;
  r.element_bytes = static_cast<double>(Probe::element_bytes);
  r.master_bytes = static_cast<double>(Probe::master_bytes);
  r.mixed = Probe::mixed_precision;
  r.peak_flops = hw.template peak_flops<typename Probe::element_type>();
  r.memory = detail::unit_costs_of<Probe, N>(first, static_cast<int>(N));
  const auto& T = Probe::lowering::tables;
  const double eb = r.element_bytes, sb = static_cast<double>(Probe::stat_bytes), mb = Probe::micro_batch;
  const double flops_rate = r.peak_flops * hw.gemm_efficiency, hbm_rate = hw.hbm_bytes_per_s * hw.hbm_efficiency;
  const int n = r.tensor;
  const double grad_bytes = hw.gradient_bytes(r.master_bytes);
  const link_price link = link_of(hw, n <= hw.devices_per_node);
  // (arrays through pointers: partition.hpp's stage_tally says why)
  const strata::layer_plan* plans = Probe::layer_plans.data();
  const auto* calls = T.calls.data();
  const int* regions = Probe::recompute_region.data();
  unit_time* units = r.units.data();
  for (std::size_t u = 0; u < N; ++u) {
    const int lo = first[u], hi = u + 1 == N ? Probe::num_layers : first[u + 1];
    unit_time& t = units[u];
    for (int i = lo; i < hi; ++i) {
      const strata::layer_plan& lp = plans[i];
      const auto& c = calls[i];
      const double f = static_cast<double>(lp.desc.forward_flops(lp.in));
      const double b = static_cast<double>(lp.desc.backward_flops(lp.in));
      const double local = static_cast<double>(lp.local_flops_per_sample) * mb;
      const double ff = f + b > 0 ? local * f / (f + b) : 0, fb = local - ff;
      const double bytes = static_cast<double>(c.dims.rows * c.dims.in_cols + c.dims.out_rows * c.dims.out_cols +
                                               c.needs.stash_values + c.needs.scratch_values + c.needs.backward_values +
                                               lp.local_param_elems) *
                               eb +
                           static_cast<double>(c.needs.stash_stats + c.needs.scratch_stats) * sb;
      const call_gemms cg = lp.desc.gemms(c.dims);
      const pass_s g = gemm_layer_s(cg, c.dims, eb, r.peak_flops, hw);
      // a view runs no kernel (a reshape; ResidualBegin's forward), nor in backward unless
      // its backward has one (ResidualBegin adds the skip's gradient)
      const bool no_forward = c.needs.view, no_backward = c.needs.view && !c.needs.backward_kernel;
      const double tf = no_forward           ? 0
                        : g.forward >= 0     ? g.forward
                        : ff / flops_rate > bytes / hbm_rate ? ff / flops_rate
                                                             : bytes / hbm_rate;
      const double tb = no_backward           ? 0
                        : g.backward >= 0     ? g.backward
                        : fb / flops_rate > 2 * bytes / hbm_rate ? fb / flops_rate
                                                                 : 2 * bytes / hbm_rate;
      double comm_f = 0, comm_b = 0;
      const comm_desc* comms = lp.comms.data();
      const bool regather = lower::regathers_at(calls, regions, i);
      for (int k = 0; k < lp.num_comms; ++k) {
        const comm_desc& x = comms[k];
        // Context<N, Split<T>>: over its tensor group (T) or its context group (N)
        const int gn = x.group == group_axis::tensor    ? Probe::context_tensor
                       : x.group == group_axis::context ? Probe::context
                                                        : n;
        const double s = collective_s(x.kind, static_cast<double>(x.elems) * (x.stats ? sb : eb), gn, link) * x.calls;
        (x.when == pass::forward ? comm_f : comm_b) += s;
        // a row split kept and gathered again before the backward (layer_call::regather)
        if (regather && k < lp.num_conversion_comms && x.kind == collective::all_gather && x.when == pass::forward) {
          comm_b += s;
          if (c.needs.weight_pass && lp.desc.num_params > 0) t.regather_s += s;  // and before its W
        }
      }
      if (c.needs.view && (i == hi - 1 || i == lo)) {
        const double copy_s = 2 * static_cast<double>(c.dims.rows * c.dims.in_cols) * eb / hbm_rate;
        if (i == hi - 1) t.edge_out_s = copy_s;
        if (i == lo && !c.needs.backward_kernel) t.edge_in_s = copy_s;
      }
      const bool recomputed = regions[i] >= 0;
      t.forward_s += tf;
      t.backward_s += tb;
      t.recompute_s += recomputed ? tf : 0;
      t.tensor_comm_s += comm_f * (recomputed ? 2 : 1) + comm_b;
      t.forward_comm_s += comm_f;
      t.model_flops += f + b;
      t.local_params += static_cast<double>(lp.local_param_elems);
      if (hw.accumulate_grads != grad_accumulation::in_place)
        t.accumulate_s += static_cast<double>(lp.local_param_elems) * (2 * grad_bytes + eb) / hbm_rate;
      if (c.needs.weight_pass && lp.desc.num_params > 0) {
        // W: the weight-gradient GEMMs, else the layer's share of its backward
        t.weight_s += g.backward >= 0 ? g.weight : tb * cg.weight_share;
        t.keep_bytes += static_cast<double>(c.dims.out_rows * c.dims.out_cols + c.needs.weight_keep) * eb;
      }
    }
  }
  return r;
}

// A schedule tag the model can price: its traits (plan/schedule_traits.hpp) and the
// bound on micro-batches in flight and the bubble it declares.
template <class S>
concept priced_schedule = requires(int n, double t) {
  { S::in_flight(n, n, n) } -> std::convertible_to<long long>;
  { S::bubble(n, t, t) } -> std::convertible_to<double>;
};

// What the model reads of a schedule, as a value (a configuration is one); 1F1B's unless
// given.
struct schedule_price {
  int chunks = 1;               // parts per stage
  bool split_backward = false;  // B and W: the stash keeps what B leaves W
  long long (*in_flight)(int p, int m, int s) = &PreferBackward::in_flight;
  double (*bubble)(int p, double stage_s, double weight_s) = &PreferBackward::bubble;
  // With several chunks, what each chunk's part of stage s keeps in flight (a tag's
  // in_flight_part, where it has one); else every part is taken at in_flight
  long long (*in_flight_part)(int p, int m, int s, int chunk) = nullptr;
};
template <priced_schedule S>
inline constexpr schedule_price price_of{
    sched::schedule_traits<S>::chunks, sched::schedule_traits<S>::split_backward, &S::in_flight, &S::bubble,
    []() -> long long (*)(int, int, int, int) {
      if constexpr (requires(int n) {
                      { S::in_flight_part(n, n, n, n) } -> std::convertible_to<long long>;
                    })
        return &S::in_flight_part;
      else
        return nullptr;
    }()};

// How the probe's units are run: degrees, batch, schedule, ZeRO.
struct parallel_config {
  int tensor = 1, pipeline = 1, data = 1;
  int micro_batch = 1, micro_batches = 1;
  schedule_price schedule = price_of<PreferBackward>;
  // ZeRO level: 1 and 2 divide the optimizer state (and 2 the gradients) by `data`; 3 the
  // masters too, each unit a TaskGraph of its own whose weights are gathered per pass
  int zero = 0;
  // Devices of a part that hold the same parameters and reduce their gradients with the
  // replicas' (a Replicate<N> or Context<N> part: plan/predict.hpp); 1 for a Split part
  int part_reduce = 1;
  constexpr int devices() const { return tensor * pipeline * data; }
  constexpr int reduce_group() const { return data * part_reduce; }
  constexpr bool shards_weights() const { return zero >= 3 && reduce_group() > 1; }  // ZeRO-3 over a real group
};

struct step_estimate {
  double step_s = 0;
  double compute_s = 0;         // M · the slowest stage's compute per micro-batch (recompute included)
  double accumulate_s = 0;      // the part of compute_s the separate gradient-accumulation passes take
  double tensor_comm_s = 0;     // M · its tensor-parallel collectives
  double pipeline_comm_s = 0;   // M · its pipeline messages
  double bubble_s = 0;          // (p − 1) / V · the slowest stage's micro-batch; ZB-H1: (p − 1)(F + B − W)
  double data_comm_s = 0;       // the gradient all-reduce over the data-parallel group
  double optimizer_s = 0;       // the Adam update (HBM-bound)
  double model_flops = 0;       // per step, the whole world (forward + backward, no recompute)
  double mfu = 0;               // model_flops / (step_s · devices · peak)
  long long memory_bytes = 0;   // the fullest stage's estimate (partition.hpp), at this micro-batch and ZeRO
  int slowest_stage = 0;
};

// Micro-batches each part of stage s keeps in flight: the schedule's bound.
constexpr long long in_flight(const parallel_config& c, int s) {
  return c.schedule.in_flight(c.pipeline, c.micro_batches, s);
}
// Micro-batches chunk `chunk`'s part of stage s keeps in flight: the tag's bound per part
// where it gives one, else the stage's.
constexpr long long in_flight(const parallel_config& c, int s, int chunk) {
  return c.schedule.in_flight_part ? c.schedule.in_flight_part(c.pipeline, c.micro_batches, s, chunk) : in_flight(c, s);
}

// Memory of a device holding units [first, end) at the configuration's micro-batch (the
// probe's, scaled) and ZeRO level over the reduction group, `in_flight` micro-batches
// stashed at once (partition.hpp's stage_memory, on the probe's units). Sums and maxima are
// tallied on the probe's values and scaled once — the same bytes as scaling each unit's
// whenever the scaled values are whole (an integer scale: the search's micro-batches over its
// probe's 1, cost::predict's 1; otherwise the kept activations' sum may exceed the per-unit
// sum by under a byte per unit) — and far less work for a constant evaluator, which allocates
// for every array element it writes and every std::array::operator[] it calls (so the arrays
// are read through pointers taken once).
template <std::size_t N>
constexpr long long stage_bytes(const profile<N>& pr, const parallel_config& c, int first, int end,
                                long long in_flight) {
  const detail::unit_costs<N>& m = pr.memory;
  const double scale = static_cast<double>(c.micro_batch) / pr.micro_batch;
  const bool shards = c.shards_weights();
  const int group = c.reduce_group();
  const unit_time* units = pr.units.data();
  const long long *st = m.state.data(), *ac = m.act.data(), *pi = m.ping.data(), *sc = m.scratch.data(),
                  *ss = m.scratch_stats.data(), *re = m.recompute.data(), *rs = m.recompute_stats.data();
  const long long *sk = m.skip.data(), *sl = m.skip_levels.data(), *ga = m.gathered.data();
  detail::stage_tally t;
  for (int k = first; k < end; ++k) {
    t.add_at(st, ac, pi, sc, ss, re, rs, static_cast<std::size_t>(k));
    t.add_held(sk, sl, ga, static_cast<std::size_t>(k));
    if (shards) {
      // Zero<3> (plan/memory.hpp): this device's chunk of the masters, gradients and both
      // moments instead; the staging and gradient slots are per stage (estimate)
      t.state += static_cast<long long>(units[k].local_params * 4 * pr.master_bytes / group) - st[k];
    } else if (c.zero >= 1 && group > 1) {  // Adam's moments: this device's chunk
      const double n = units[k].local_params, mb = pr.master_bytes;
      t.state -= static_cast<long long>(n * 2 * mb * (1.0 - 1.0 / group));
      // ZeRO-2 (exec/zero.hpp): the gradient chunk plus a slot the backward writes the
      // TaskGraph's gradients into before they are reduce-scattered; a stage here is one
      // TaskGraph, so the slot is the stage's whole gradient
      if (c.zero >= 2) t.state += static_cast<long long>(n * mb / group);
    }
  }
  const double entry = static_cast<double>(m.entry.data()[first]), exit = static_cast<double>(m.exit.data()[end - 1]);
  return t.scaled(scale).memory(static_cast<long long>(entry * scale), static_cast<long long>(exit * scale), in_flight);
}

// The step time of units cut into K parts at cuts[0..K] (part k = units [cuts[k], cuts[k + 1])):
// K stages, or with V = c.chunks chunks K / V stages, stage s running parts s, s + p, ...
template <std::size_t N, std::size_t K>
constexpr step_estimate estimate(const profile<N>& pr, const std::array<int, K + 1>& cuts, const parallel_config& c,
                                 const hardware& hw) {
  step_estimate e{};
  const double scale = static_cast<double>(c.micro_batch) / pr.micro_batch;
  const int parts = static_cast<int>(K), chunks = c.schedule.chunks > 1 ? c.schedule.chunks : 1, p = parts / chunks;
  // pipeline neighbours are `tensor` ranks apart: some boundary crosses nodes unless the
  // whole replica sits in one node
  const link_price pp_link = link_of(hw, c.tensor * p <= hw.devices_per_node);
  double slowest = -1, slow_compute = 0, slow_tp = 0, slow_pp = 0, slow_weight = 0, slow_acc = 0, most_params = 0;
  double slow_forward = 0;  // the slowest stage's forward compute and collectives per micro-batch
  double sum_compute = 0, sum_tp = 0, sum_pp = 0, sum_acc = 0;  // over the stages (hardware::shared_compute)
  const bool dp_intra = c.devices() <= hw.devices_per_node;
  // Across nodes a ring runs per network adapter (NCCL's channels): the data group's g
  // devices in a node (its members are tensor · pipeline ranks apart) cross between nodes
  // on g adapters at once, up to what NVLink carries inside the node.
  const int replica = c.tensor * c.pipeline;
  const int per_node = replica >= hw.devices_per_node ? 1 : hw.devices_per_node / replica;
  const double across = inter_rate(hw) * (per_node < c.data ? per_node : c.data);
  link_price dp_link = link_of(hw, dp_intra);
  if (!dp_intra) dp_link.bytes_per_s = across < intra_rate(hw) ? across : intra_rate(hw);
  const bool zero3 = c.shards_weights();
  double slow_gather = 0;
  const unit_time* units = pr.units.data();  // (partition.hpp's stage_tally: why pointers)
  const long long *entry = pr.memory.entry.data(), *exit = pr.memory.exit.data();
  for (int s = 0; s < p; ++s) {
    double compute = 0, tp = 0, params = 0, weight = 0, pp = 0, acc = 0, forward = 0;
    double largest = 0;  // Zero<3>: the largest unit's (TaskGraph's) parameters, a slot's size
    int with_params = 0;
    long long bytes = 0;
    for (int ch = 0; ch < chunks; ++ch) {
      const int k = ch * p + s;
      const int first = cuts[static_cast<std::size_t>(k)], end = cuts[static_cast<std::size_t>(k + 1)];
      double keep = 0;
      for (int u = first; u < end; ++u) {
        const unit_time& t = units[u];
        compute += (t.forward_s + t.backward_s + t.recompute_s) * scale + t.accumulate_s;
        tp += (t.tensor_comm_s + (c.schedule.split_backward ? t.regather_s : 0)) * scale;
        forward += (t.forward_s + t.forward_comm_s) * scale;
        params += t.local_params;
        largest = t.local_params > largest ? t.local_params : largest;
        with_params += t.local_params > 0;
        weight += (t.weight_s + (c.schedule.split_backward ? t.regather_s : 0)) * scale + t.accumulate_s;
        acc += t.accumulate_s;
        keep += t.keep_bytes * scale;
      }
      if (parts > 1) {  // activations on, gradients back, at each edge of the part
        const double out = k + 1 < parts ? static_cast<double>(exit[end - 1]) * scale : 0;
        const double in = k > 0 ? static_cast<double>(entry[first]) * scale : 0;
        const double edge_out = k + 1 < parts ? units[end - 1].edge_out_s * scale : 0;
        const double edge_in = k > 0 ? units[first].edge_in_s * scale : 0;
        compute += edge_out + edge_in;
        forward += edge_out;
        // each direction's send overlaps the matching receive: out forward (and its gradient
        // back), in backward (and its activation forward)
        pp += collective_s(collective::send_recv, out, 2, pp_link) +
              collective_s(collective::send_recv, in, 2, pp_link);
      }
      const long long held = in_flight(c, s, ch);
      bytes += stage_bytes(pr, c, first, end, held) +
               (c.schedule.split_backward ? static_cast<long long>(keep) * held : 0);
    }
    // Zero<3>: each unit's weights all-gathered (in master precision) before its forward and
    // again before its backward (a recomputed forward reuses the backward's slot), inside
    // every micro-batch; two compute-type staging slots, one master slot in mixed precision
    // and the gradient slots (two when more than one unit has parameters)
    const double gather =
        zero3 ? 2 * collective_s(collective::all_gather, params * pr.master_bytes, c.reduce_group(), dp_link) : 0;
    if (zero3)
      bytes += static_cast<long long>(largest * (2 * pr.element_bytes + (pr.mixed ? pr.master_bytes : 0) +
                                                 (with_params > 1 ? 2 : 1) * pr.master_bytes));
    const double total = compute + tp + pp + gather;
    sum_compute += compute, sum_tp += tp, sum_pp += pp, sum_acc += acc;
    if (total > slowest) {
      slowest = total, slow_compute = compute, slow_tp = tp, slow_pp = pp, slow_weight = weight, slow_acc = acc;
      slow_forward = forward;
      slow_gather = gather;
      e.slowest_stage = s;
    }
    most_params = params > most_params ? params : most_params;
    e.memory_bytes = bytes > e.memory_bytes ? bytes : e.memory_bytes;
  }
  const double m = c.micro_batches;
  // autograd stores the first micro-batch's gradient: no pass for it
  const double no_pass = hw.accumulate_grads == grad_accumulation::after_first ? 1 : 0;
  e.compute_s = m * slow_compute - no_pass * slow_acc;
  e.accumulate_s = (m - no_pass) * slow_acc;
  e.tensor_comm_s = m * slow_tp;
  e.pipeline_comm_s = m * slow_pp;
  e.bubble_s = c.schedule.bubble(p, slowest, slow_weight);
  if (hw.shared_compute) {  // the stages' mean, no bubble: a waiting device lends its share
    e.compute_s = (m * sum_compute - no_pass * sum_acc) / p;
    e.accumulate_s = (m - no_pass) * sum_acc / p;
    e.tensor_comm_s = m * sum_tp / p;
    e.pipeline_comm_s = m * sum_pp / p;
    e.bubble_s = 0;
  }
  // gradients in master precision (or the runtime's hardware::grad_bytes) over the data
  // group: one all-reduce; under ZeRO-1 a reduce-scatter and the parameters' all-gather (the
  // same bytes); under ZeRO-2 the reduce-scatter after every micro-batch's backward
  // (plan/communication.hpp); under ZeRO-3 that too, and no final all-gather. An all-reduce
  // in buckets during the last backward (without a pipeline: PyTorch's DDP reduces after
  // every micro-batch of one) pays each bucket's latencies and shows only what outlasts that
  // backward, and at least its last bucket (reduced once the backward ends).
  const double grads = most_params * hw.gradient_bytes(pr.master_bytes);
  const int g = c.reduce_group();
  double all_reduce = collective_s(collective::all_reduce, grads, g, dp_link);
  if (hw.grad_bucket_bytes > 0 && c.zero == 0 && parts == 1 && grads > 0) {
    const double bucket = grads < hw.grad_bucket_bytes ? grads : hw.grad_bucket_bytes;
    const double buckets = static_cast<double>(static_cast<long long>((grads + bucket - 1) / bucket));
    const double bucketed = buckets * collective_s(collective::all_reduce, grads / buckets, g, dp_link);
    const double last = collective_s(collective::all_reduce, bucket, g, dp_link);
    // the last micro-batch's backward, its accumulation pass only where one runs
    const double window = slowest - slow_forward - (m > no_pass ? 0 : slow_acc);
    all_reduce = bucketed - window > last ? bucketed - window : last;
  }
  e.data_comm_s = zero3        ? m * (collective_s(collective::reduce_scatter, grads, g, dp_link) + slow_gather)
                  : c.zero >= 2 ? m * collective_s(collective::reduce_scatter, grads, g, dp_link) +
                                      collective_s(collective::all_gather, grads, g, dp_link)
                                : all_reduce;
  const double hbm_rate = hw.hbm_bytes_per_s * hw.hbm_efficiency;
  if (g > 1) e.data_comm_s += most_params * hw.grad_pack_bytes_per_param / hbm_rate;
  // Adam: masters, two moments read and written, the gradient read, the weights written
  const double updated = c.zero >= 1 && c.reduce_group() > 1 ? most_params / c.reduce_group() : most_params;
  const double per_param =
      hw.optimizer_bytes_per_param > 0 ? hw.optimizer_bytes_per_param : 7 * pr.master_bytes + pr.element_bytes;
  e.optimizer_s = updated * per_param / hbm_rate;
  e.step_s = e.compute_s + e.tensor_comm_s + e.pipeline_comm_s + e.bubble_s + e.data_comm_s + e.optimizer_s;
  double flops = 0;
  for (std::size_t u = 0; u < N; ++u) flops += units[u].model_flops;
  e.model_flops = flops * c.micro_batch * c.micro_batches * c.data;
  e.mfu = e.step_s > 0 ? e.model_flops / (e.step_s * c.devices() * pr.peak_flops) : 0;
  return e;
}

}  // namespace strata::cost
