// Context parallelism on the host backend (issue 26): the GPT of bench_gpt (4 pre-LN
// blocks, D 128, 4 heads, byte vocabulary) at long contexts.
//
//  1. Memory per device, from the lowered plan (constexpr, no run): the activation arena,
//     the stash of one micro-batch and the peak, at Seq 2k, 8k and 32k under Context<1, 2,
//     4, 8>, attention exchanging by all-gather or around the ring (ContextRing) — the stash
//     shrinks N-fold under both; the all-gather's arena less (attention's scratch holds the
//     whole sequence's k and v), the ring's N-fold too; and under Context<N, Split<2>> (CP × TP:
//     each device also holds half of every layer's shards and heads).
//  2. A training step at Seq 2048, two sequences per step (MicroBatch<1> × 2), float32, AdamW,
//     on however many processes mpiexec starts (1, 2 or 4: Context<world>), each with
//     `threads` threads, attention exchanging by all-gather (or all-to-all: ContextAllToAll; or
//     around the ring: ContextRing; or, on 4 processes, CP2 × TP2: Context<2, Split<2>>, `tp2` or
//     `tp2-ring`):
//     the mean step time after warm-up and tokens/s, beside the cost model's prediction for the
//     plan (plan/predict.hpp) on this machine's description measured first by every process
//     at once (runtime/calibrate.hpp: GEMM rate, copy bandwidth, neighbour link; printed).
//     Compare runs that use the same cores: `-n 1` with 2 threads against `-n 2` with 1 thread each.
//
//   mpiexec -n N bench_host_context <threads> [steps] [all-to-all|ring|tp2|tp2-ring]     (bench/host/run_context.sh)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <strata/plan/predict.hpp>
#include <strata/runtime/calibrate.hpp>
#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

using namespace strata;

namespace {

constexpr int V = 256, D = 128, H = 4, Blocks = 4;
template <int S>
using Attn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>;
using MLP = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;
// Context<N, Split<1, ...>> is Context<N, ...>
template <int S, int N, class Exchange = ContextAllGather, int TP = 1>
using GPT = Plan<Context<N, Split<TP, Embedding<V, D>, PositionEmbedding<S, D>, Repeat<Blocks, Attn<S>, MLP>, LayerNorm<D>,
                                  Linear<D, V>>>,
                 Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<1>, NumMicroBatch<2>, Exchange>;

double mib(long long b) { return double(b) / (1024.0 * 1024.0); }

template <class Exchange>
constexpr const char* exchange_name() {
  return to_string(Exchange::value).data();  // literals: null-terminated
}
template <int S, class Exchange, int TP, int... N>
void memory_rows() {
  (std::printf("| %6d | %2d | %d | %-10s | %9.1f | %9.1f | %9.1f |\n", S, N, TP, N == 1 ? "-" : exchange_name<Exchange>(),
               mib(GPT<S, N, Exchange, TP>::activation_arena_bytes(0)), mib(GPT<S, N, Exchange, TP>::stash_bytes(0)),
               mib(GPT<S, N, Exchange, TP>::peak_memory_bytes(0))),
   ...);
}

template <int N, class Exchange, int TP = 1>
int run(world<Host, comm::mpi_communicator>& w, unsigned threads, int steps) {
  constexpr int S = 2048;
  using P = GPT<S, N, Exchange, TP>;
  w.queue().set_threads(threads);
  const hardware hw = calibrate(w, {.gemm_size = 256, .repeats = 10});
  const double predicted = cost::predict<P>(hw).step_s;
  auto train = make_trainer<P>(w, AdamW{.lr = 1e-3, .weight_decay = 0.01});
  std::mt19937 g(1);
  constexpr int B = 2;  // the replica's step: two sequences
  std::vector<float> x(std::size_t(S) * B);
  std::vector<std::int32_t> y(std::size_t(S) * B);
  for (auto& v : x) v = float(g() % V);
  for (auto& v : y) v = std::int32_t(g() % V);
  const batch_view<float> batch{.inputs = x, .labels = y, .samples = std::size_t(B)};
  for (int i = 0; i < 2; ++i) train.step(batch);
  const auto t0 = std::chrono::steady_clock::now();
  double loss = 0;
  for (int i = 0; i < steps; ++i) loss = train.step(batch).loss;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
  if (w.rank() == 0)
    std::printf("| %d | %d | %d | %s | %u | %.3f | %.3f | %.2f | %.0f | %.4f | %.1f / %.1f / %.2f |\n", S, N, TP,
                exchange_name<Exchange>(), threads, s * 1e3, predicted * 1e3, s / predicted, double(S) * B / s, loss,
                hw.flops_fp32 * 1e-9, hw.hbm_bytes_per_s * 1e-9, hw.intra_bytes_per_s * 1e-9);
  return 0;
}

template <int N>
int run_mode(world<Host, comm::mpi_communicator>& w, unsigned threads, int steps, const std::string& mode) {
  if (mode == "all-to-all") return run<N, ContextAllToAll>(w, threads, steps);
  if (mode == "ring") return run<N, ContextRing>(w, threads, steps);
  if constexpr (N == 4) {  // CP2 × TP2 on the same 4 processes
    if (mode == "tp2") return run<2, ContextAllGather, 2>(w, threads, steps);
    if (mode == "tp2-ring") return run<2, ContextRing, 2>(w, threads, steps);
  }
  return run<N, ContextAllGather>(w, threads, steps);
}

}  // namespace

int main(int argc, char** argv) {
  auto w = strata::init<Host>(argc, argv);
  const unsigned threads = argc > 1 ? unsigned(std::atoi(argv[1])) : 1;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 5;
  const std::string mode = argc > 3 ? argv[3] : "all-gather";
  try {
    if (w.rank() == 0) {
      std::printf("Memory per device (MiB, float32, one micro-batch of 1 sequence), from the lowered plan:\n\n");
      std::printf("| Seq | CP | TP | exchange | arena | stash | peak |\n|---:|---:|---:|---|---:|---:|---:|\n");
      memory_rows<2048, ContextAllGather, 1, 1, 2, 4, 8>();
      memory_rows<2048, ContextRing, 1, 2, 4, 8>();
      memory_rows<8192, ContextAllGather, 1, 1, 2, 4, 8>();
      memory_rows<8192, ContextRing, 1, 2, 4, 8>();
      memory_rows<32768, ContextAllGather, 1, 1, 2, 4, 8>();
      memory_rows<32768, ContextRing, 1, 2, 4, 8>();
      memory_rows<32768, ContextAllGather, 2, 2, 4>();
      memory_rows<32768, ContextRing, 2, 2, 4>();
      std::printf("\nTraining step (2 sequences per step, AdamW, float32):\n\n");
      std::printf("| Seq | CP | TP | attention exchange | threads/process | ms/step | predicted ms | measured/predicted | "
                  "tokens/s | loss | calibrated fp32 GFLOP/s / copy GB/s / link GB/s |\n"
                  "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|\n");
    }
    switch (w.size()) {
      case 1: return run<1, ContextAllGather>(w, threads, steps);
      case 2: return run_mode<2>(w, threads, steps, mode);
      case 4: return run_mode<4>(w, threads, steps, mode);
      default:
        if (w.rank() == 0) std::fprintf(stderr, "bench_host_context: run it on 1, 2 or 4 processes\n");
        return 2;
    }
  } catch (const std::exception& e) {
    return w.fail(e);
  }
}
