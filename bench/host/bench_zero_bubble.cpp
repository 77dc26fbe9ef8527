// ZB-H1 and ZB-V against 1F1B on the host: a GPT of four blocks (pre-LN causal
// self-attention and GeLU MLP, D 256, 8 heads, context 64, float32, Adam) on two pipeline
// stages on 2 MPI processes (one per core) — two parts for 1F1B and ZB-H1, four parts in a
// V for ZB-V (stage 0: blocks 1 and 4, stage 1: blocks 2 and 3), and the same four parts
// under interleaved 1F1B (I2: as many messages as ZB-V, no split) — M = 2, 4 and 8
// micro-batches of 2 sequences. Per schedule and M: the step time (best of alternating
// passes) and the ratio to 1F1B, against two predictions: the closed forms' when a
// forward, a B and a W cost the same, (3M + p − 1) / (3(M + p − 1)) for ZB-H1 and
// (6M + p − 1) / (6(M + p − 1)) for ZB-V (a part being half a stage), and the schedule
// simulator's (sched::simulate_costs) run with each stage's own F, B and W times (per
// part for ZB-V, averaged over the stage's two), measured in separate timed steps (which
// synchronize around every action). All three train the same bits (checked here on the
// final parameters too). `mpiexec -n 2 bench_zero_bubble [steps]`
// (bench/host/run_zero_bubble.sh).
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

using namespace strata;

constexpr int V = 512, D = 256, H = 8, S = 64;
using Attn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>;
using Mlp = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;
template <class Sched, int M>
using Gpt = Plan<Pipeline<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, Attn, Mlp, Attn, Mlp>,
                          Replicate<1, Attn, Mlp, Attn, Mlp, LayerNorm<D>, Linear<D, V>>>,
                 Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<2>, NumMicroBatch<M>, Schedule<Sched>>;
template <class Sched, int M>
using Gpt4 = Plan<Pipeline<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, Attn, Mlp>, Replicate<1, Attn, Mlp>,
                           Replicate<1, Attn, Mlp>, Replicate<1, Attn, Mlp, LayerNorm<D>, Linear<D, V>>>,
                  Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<2>, NumMicroBatch<M>, Schedule<Sched>>;
template <int M>
using GptV = Gpt4<ZeroBubbleV, M>;
template <int M>
using GptI = Gpt4<Interleaved<2>, M>;
template <int M>
using GptD = Gpt4<DualPipeV, M>;  // the V in DualPipe's order (M >= 2p)  // the same four parts, placed c·p + s, one backward each

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct result {
  double ms = 1e300;
  std::vector<std::vector<std::vector<double>>> params;  // the whole model, on every rank
  std::array<double, 3> op_ms{};                         // this stage's F, B, W per micro-batch
};

template <class P, class W>
void run(W& w, int steps, result& r) {
  auto t = make_trainer<P, float>(w, Adam{.lr = 1e-3}, 3);
  const std::size_t n = std::size_t(P::replica_batch);
  std::mt19937 g(11);
  std::vector<float> x(n * S);
  std::vector<std::int32_t> y(n * S);
  for (auto& v : x) v = float(g() % V);
  for (auto& v : y) v = std::int32_t(g() % V);
  const batch_view<float> batch{.inputs = x, .labels = y, .samples = n};
  for (int i = 0; i < 2; ++i) t.step(batch);  // warm-up
  w.comm().agree(true, "");
  const double t0 = now();
  for (int i = 0; i < steps; ++i) t.step(batch);
  w.comm().agree(true, "");
  r.ms = std::min(r.ms, (now() - t0) * 1e3 / steps);
  r.params = t.gather_parameters();
  t.time_compute(true);  // the actions' own times, in steps of their own
  for (int i = 0; i < steps; ++i) t.step(batch);
  const auto& c = t.compute_times();
  auto per = [](double s, long long n) { return n > 0 ? s * 1e3 / double(n) : 0.0; };
  r.op_ms = {per(c.forward_s, c.forwards), per(c.backward_s, c.backwards), per(c.weight_s, c.weights)};
}

// The simulator's makespan (ms) of P's program with both stages' measured costs (µs).
template <class P, class W>
double simulated_ms(W& w, const result& r, std::array<double, 6>& all) {
  w.comm().all_gather(r.op_ms.data(), all.data(), 3);
  sched::stage_costs<2> c;
  for (int s = 0; s < 2; ++s) {
    c.fwd[std::size_t(s)] = static_cast<long long>(all[std::size_t(3 * s)] * 1e3);
    c.bwd[std::size_t(s)] = static_cast<long long>(all[std::size_t(3 * s + 1)] * 1e3);
    c.wgt[std::size_t(s)] = static_cast<long long>(all[std::size_t(3 * s + 2)] * 1e3);
  }
  return double(sched::simulate_costs(P::program, c).makespan) / 1e3;
}

template <int M, class W>
void compare(W& w, int steps) {
  result one, zb, zv, zi, zd;
  constexpr bool dual = M >= 4;         // DualPipeV needs 2p micro-batches
  for (int pass = 0; pass < 3; ++pass) {  // alternating, so drift hits all of them
    run<Gpt<PreferBackward, M>>(w, steps, one);
    run<Gpt<ZeroBubbleH1, M>>(w, steps, zb);
    run<GptV<M>>(w, steps, zv);
    run<GptI<M>>(w, steps, zi);
    if constexpr (dual) run<GptD<M>>(w, steps, zd);
  }
  const int p = 2;
  const double closed = double(3 * M + p - 1) / double(3 * (M + p - 1));
  const double closed_v = double(6 * M + p - 1) / double(6 * (M + p - 1));
  const double closed_i = double(2 * M + p - 1) / double(2 * (M + p - 1));  // (M + (p − 1)/2) / (M + p − 1)
  std::array<double, 6> c1{}, cz{}, cv{}, ci{};
  const double sim_one = simulated_ms<Gpt<PreferBackward, M>>(w, one, c1);
  const double sim_zb = simulated_ms<Gpt<ZeroBubbleH1, M>>(w, zb, cz);
  const double sim_zv = simulated_ms<GptV<M>>(w, zv, cv);
  const double sim_zi = simulated_ms<GptI<M>>(w, zi, ci);
  std::array<double, 6> cd{};
  double sim_zd = 0;
  if constexpr (dual) sim_zd = simulated_ms<GptD<M>>(w, zd, cd);
  if (w.rank() == 0) {
    std::printf("%3d %6s %10.2f %10.2f %9.3f | %9.3f %10.2f %10.2f %9.3f | %9s\n", M, "ZB-H1", one.ms, zb.ms,
                zb.ms / one.ms, closed, sim_one, sim_zb, sim_zb / sim_one, one.params == zb.params ? "yes" : "NO");
    std::printf("%3d %6s %10.2f %10.2f %9.3f | %9.3f %10.2f %10.2f %9.3f | %9s\n", M, "ZB-V", one.ms, zv.ms,
                zv.ms / one.ms, closed_v, sim_one, sim_zv, sim_zv / sim_one, one.params == zv.params ? "yes" : "NO");
    std::printf("%3d %6s %10.2f %10.2f %9.3f | %9.3f %10.2f %10.2f %9.3f | %9s\n", M, "I2", one.ms, zi.ms,
                zi.ms / one.ms, closed_i, sim_one, sim_zi, sim_zi / sim_one, one.params == zi.params ? "yes" : "NO");
    if constexpr (dual)
      std::printf("%3d %6s %10.2f %10.2f %9.3f | %9.3f %10.2f %10.2f %9.3f | %9s\n", M, "DPV", one.ms, zd.ms,
                  zd.ms / one.ms, closed_v, sim_one, sim_zd, sim_zd / sim_one, one.params == zd.params ? "yes" : "NO");
    std::printf("      measured / simulated step: 1F1B %.3f, ZB-H1 %.3f, ZB-V %.3f, I2 %.3f", one.ms / sim_one,
                zb.ms / sim_zb, zv.ms / sim_zv, zi.ms / sim_zi);
    if constexpr (dual) std::printf(", DualPipeV %.3f", zd.ms / sim_zd);
    std::printf("\n");
    std::printf("      measured ms per micro-batch: 1F1B F %.2f/%.2f, B+W %.2f/%.2f; ZB-H1 F %.2f/%.2f, B %.2f/%.2f, "
                "W %.2f/%.2f; ZB-V per part F %.2f/%.2f, B %.2f/%.2f, W %.2f/%.2f (stage 0/1)\n",
                c1[0], c1[3], c1[1], c1[4], cz[0], cz[3], cz[1], cz[4], cz[2], cz[5], cv[0], cv[3], cv[1], cv[4], cv[2],
                cv[5]);
  }
}

int main(int argc, char** argv) {
  auto w = init<Host>(argc, argv);
  const int steps = argc > 1 ? std::atoi(argv[1]) : 5;
  if (w.size() != 2) {
    if (w.rank() == 0) std::printf("bench_zero_bubble runs on 2 processes (mpiexec -n 2)\n");
    return 1;
  }
  if (w.rank() == 0) {
    std::printf("GPT, 4 blocks (D %d, %d heads, context %d, vocabulary %d, float32, Adam), 2 stages x 2 blocks (ZB-V: "
                "4 parts of a block in a V), "
                "micro-batch 2 sequences; best of 3 alternating passes of %d steps\n", D, H, S, V, steps);
    std::printf("%3s %6s %10s %10s %9s | %9s %10s %10s %9s | %9s\n", "M", "sched", "1F1B ms", "ZB ms", "ZB/1F1B",
                "closed", "sim 1F1B", "sim ZB", "sim ratio", "same bits");
  }
  compare<2>(w, steps);
  compare<4>(w, steps);
  compare<8>(w, steps);
  return 0;
}
