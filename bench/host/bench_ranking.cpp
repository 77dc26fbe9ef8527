// Does the search rank plans the way they run here? (issue 29) A small GPT (4 pre-LN blocks,
// D 64, 4 heads, Seq 64, byte vocabulary, global batch 16) is searched for RANKING_DEVICES
// devices over tensor degrees 1 and 2; from the configurations the search tries, one per
// (tensor degree, sequence parallelism, recomputation, pipeline depth, schedule) — micro-batch
// 2, the ZeRO level cycling through those allowed — is built as the ordinary Plan the search
// would return for it and run on this many processes. First every process measures this
// machine at once (runtime/calibrate.hpp: its GEMM rate, copy bandwidth, the link between
// neighbours); each configuration is then priced twice on that description — as the search
// prices it (its probe's profile, cut and scaled; Search::reprice) and as the plan it became
// (cost::predict) — and timed: the mean of `steps` steps after two, in `passes` passes over
// all the configurations (3 by default), the fastest pass kept — processes sharing cores are
// slowed now and then by what else the machine runs, and a pass that was slowed is not the
// plan's time; alternating spreads a drift over every row. Reported: every row,
// the Spearman rank correlation of each prediction with the measured times, and how far the
// search's choice (the fastest by its own estimate) is from the fastest measured.
//
//   mpiexec -n RANKING_DEVICES bench_host_ranking<RANKING_DEVICES> [steps] [passes]   (bench/host/run_ranking.sh)
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <utility>
#include <vector>

#include <strata/plan/predict.hpp>
#include <strata/plan/search.hpp>
#include <strata/runtime/calibrate.hpp>
#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

#ifndef RANKING_DEVICES
#define RANKING_DEVICES 4
#endif

using namespace strata;

namespace {

constexpr int Devices = RANKING_DEVICES, V = 256, S = 64, D = 64, H = 4, Batch = 16;
using Attn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>;
using MLP = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;
using GPT = Model<Embedding<V, D>, PositionEmbedding<S, D>, Repeat<4, Attn, MLP>, LayerNorm<D>, Linear<D, V>>;
// the list of configurations comes from the search; the A100 description only orders it at
// compile time (every configuration fits 4 GiB)
using Found = Search<GPT, Devices, 4096, Batch, hw::A100_80GB, TensorDegrees<1, 2>, Input<S>,
                     Loss<SoftmaxCrossEntropy>>;

// One configuration per (t, SP, RC, p, schedule): micro-batch 2, ZeRO cycling 0-3 over
// the kinds that have a data group (else 0), the first row that matches.
constexpr int max_runs = 30;  // the first 30 kinds in the search's order (8 devices have more)
struct selection {
  std::array<int, max_runs> rows{};
  int n = 0;
};
constexpr const candidate& row(int i) { return Found::all.rows[static_cast<std::size_t>(i)]; }
constexpr bool same_kind(const candidate& a, const candidate& b) {
  return a.tensor == b.tensor && a.sequence_parallel == b.sequence_parallel && a.recompute == b.recompute &&
         a.pipeline == b.pipeline && a.schedule == b.schedule;
}
// The first configuration of c's kind at micro-batch 2 and ZeRO level z (-1: not tried).
constexpr int row_of(const candidate& c, int z) {
  for (int j = 0; j < Found::all.size; ++j)
    if (same_kind(row(j), c) && row(j).micro_batch == 2 && row(j).zero == z) return j;
  return -1;
}
constexpr selection selected = [] {
  selection s;
  int cycle = 0;
  for (int i = 0; i < Found::all.size && s.n < max_runs; ++i) {
    const candidate& c = row(i);
    if (c.micro_batch != 2) continue;
    bool seen = false;
    for (int k = 0; k < s.n; ++k) seen = seen || same_kind(row(s.rows[static_cast<std::size_t>(k)]), c);
    if (seen) continue;
    // the ZeRO level this kind gets: the next of the cycle that the search tried for it
    int pick = i;
    for (int t = 0; c.data > 1 && t < 4; ++t)
      if (const int j = row_of(c, (cycle + t) % 4); j >= 0) {
        pick = j;
        cycle = (cycle + t) % 4 + 1;
        break;
      }
    s.rows[static_cast<std::size_t>(s.n++)] = pick;
  }
  return s;
}();
static_assert(selected.n >= (Devices > 2 ? 10 : 8) && selected.n <= 30, "the benchmark runs 10-30 configurations");

struct measured_row {
  candidate c;
  double measured = 0, plan = 0;
  cost::step_estimate search{};  // the search's estimate, term by term
};

template <int I>
measured_row run_one(world<Host, comm::mpi_communicator>& w, const hardware& hw, int steps) {
  constexpr int row = selected.rows[static_cast<std::size_t>(I)];
  constexpr candidate c = Found::all.rows[static_cast<std::size_t>(row)];
  using P = typename Found::template plan_of_candidate<row>;
  measured_row r{c};
  r.search = Found::reprice(c, hw);
  r.plan = cost::predict<P>(hw, c.data).step_s;
  auto train = make_trainer<P>(w, AdamW{.lr = 1e-3, .weight_decay = 0.01});
  std::mt19937 g(1);
  const std::size_t n = std::size_t(P::replica_batch);
  std::vector<float> x(n * S);
  std::vector<std::int32_t> y(n * S);
  for (auto& v : x) v = float(g() % V);
  for (auto& v : y) v = std::int32_t(g() % V);
  const batch_view<float> batch{.inputs = x, .labels = y, .samples = n};
  for (int i = 0; i < 2; ++i) train.step(batch);
  w.comm().barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) train.step(batch);
  w.comm().barrier();
  r.measured = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
  return r;
}

// Spearman's rho: Pearson's correlation of the ranks (ties averaged).
std::vector<double> ranks_of(const std::vector<double>& v) {
  std::vector<std::size_t> order(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (std::size_t i = 0; i < order.size();) {
    std::size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
    for (std::size_t k = i; k <= j; ++k) r[order[k]] = 0.5 * double(i + j) + 1;
    i = j + 1;
  }
  return r;
}
double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  const auto ra = ranks_of(a), rb = ranks_of(b);
  const double n = double(a.size()), mean = (n + 1) / 2;
  double sab = 0, saa = 0, sbb = 0;
  for (std::size_t i = 0; i < ra.size(); ++i) {
    sab += (ra[i] - mean) * (rb[i] - mean);
    saa += (ra[i] - mean) * (ra[i] - mean);
    sbb += (rb[i] - mean) * (rb[i] - mean);
  }
  return sab / std::sqrt(saa * sbb);
}

template <std::size_t... I>
std::vector<measured_row> run_all(world<Host, comm::mpi_communicator>& w, const hardware& hw, int steps, int passes,
                                  std::index_sequence<I...>) {
  std::vector<measured_row> rows;
  (rows.push_back(run_one<int(I)>(w, hw, steps)), ...);
  for (int pass = 1; pass < passes; ++pass)
    ((rows[I].measured = std::min(rows[I].measured, run_one<int(I)>(w, hw, steps).measured)), ...);
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  auto w = strata::init<Host>(argc, argv);
  const int steps = argc > 1 ? std::atoi(argv[1]) : 5;
  const int passes = argc > 2 ? std::atoi(argv[2]) : 3;
  try {
    if (w.size() != Devices) throw agreed_error("bench_host_ranking: run it on " + std::to_string(Devices) + " processes");
    w.queue().set_threads(1);
    // products of the model's size: rows of a micro-batch (2 · 64) by its features; collectives
    // of a micro-batch's activations (2 · 64 · 64 floats)
    const hardware hw = calibrate(w, {.gemm_size = 128, .collective_bytes = 2 * S * D * sizeof(float), .repeats = 10});
    const auto rows = run_all(w, hw, steps, passes, std::make_index_sequence<static_cast<std::size_t>(selected.n)>{});
    if (w.rank() != 0) return 0;
    std::printf("Calibrated on %d processes of 1 thread: fp32 GEMM %.2f GFLOP/s, copy %.2f GB/s, link %.3f GB/s "
                "each way, latency %.1f us; all-reduce: %.2f us a call, %.3f of the link's rate\n\n",
                Devices, hw.flops_fp32 * 1e-9, hw.hbm_bytes_per_s * 1e-9, hw.intra_bytes_per_s * 1e-9,
                hw.intra_latency_s * 1e6, hw.collective_latency_s * 1e6, hw.intra_efficiency);
    std::printf("| # | TP | PP | DP | mb | M | SP | RC | ZeRO | schedule | measured ms | search's estimate ms | "
                "plan's prediction ms | measured / search | est. compute | TP comm | PP comm + bubble | DP comm + update |\n"
                "|---:|---:|---:|---:|---:|---:|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    std::vector<double> m, se, pl;
    std::size_t chosen = 0, fastest = 0;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const measured_row& r = rows[i];
      const auto label = Found::schedules::label[static_cast<std::size_t>(r.c.schedule)];
      const cost::step_estimate& e = r.search;
      std::printf("| %zu | %d | %d | %d | %d | %d | %s | %s | %d | %.*s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | "
                  "%.2f |\n",
                  i + 1, r.c.tensor, r.c.pipeline, r.c.data, r.c.micro_batch, r.c.micro_batches,
                  r.c.sequence_parallel ? "y" : "n", r.c.recompute ? "y" : "n", r.c.zero, int(label.size()),
                  label.data(), r.measured * 1e3, e.step_s * 1e3, r.plan * 1e3, r.measured / e.step_s,
                  e.compute_s * 1e3, e.tensor_comm_s * 1e3, (e.pipeline_comm_s + e.bubble_s) * 1e3,
                  (e.data_comm_s + e.optimizer_s) * 1e3);
      m.push_back(r.measured), se.push_back(e.step_s), pl.push_back(r.plan);
      if (e.step_s < rows[chosen].search.step_s) chosen = i;
      if (r.measured < rows[fastest].measured) fastest = i;
    }
    std::printf("\nSpearman rank correlation with the measured times: search's estimate %.3f, plan's prediction %.3f "
                "(%zu configurations)\n",
                spearman(se, m), spearman(pl, m), rows.size());
    std::printf("The search's choice (#%zu, %.2f ms) against the fastest measured (#%zu, %.2f ms): %.3f\n", chosen + 1,
                rows[chosen].measured * 1e3, fastest + 1, rows[fastest].measured * 1e3,
                rows[chosen].measured / rows[fastest].measured);
    return 0;
  } catch (const std::exception& e) {
    return w.fail(e);
  }
}
