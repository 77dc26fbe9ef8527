// Colossal-AI's tensor modes on the host: one GPT block (pre-LN causal self-attention and
// GeLU MLP, D 128, 8 heads, context 64, float32, Adam) trained on 8 MPI processes as 1D
// (Split<8>, Megatron), 2D (Split<4>, q = 2, times data parallel 2), 2.5D (Split<8>, q = 2,
// depth 2) and 3D (Split<8>, q = 2); the block's output feeds the loss (D classes). Per
// mode: the step time (best of alternating passes), and the bytes one device moves per
// step, counted by the counting communicator, next to the planner's communication_of for
// the same device. `mpiexec -n 8 bench_tensor_modes [steps]` (bench/host/run_tensor_modes.sh).
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <random>
#include <vector>

#include <strata/comm/counting.hpp>
#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

using namespace strata;

constexpr int D = 128, H = 8, S = 64, Samples = 8;  // sequences per step, the whole job
using Attn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>;
using Mlp = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;
template <int N, class Mode, int MB>
using Block = Plan<Split<N, Attn, Mlp>, Input<S, D>, Loss<SoftmaxCrossEntropy>, MicroBatch<MB>, Mode>;
using P1 = Block<8, Tensor1D, Samples>;
using P2 = Block<4, Tensor2D, Samples / 2>;  // two replicas of 4 devices: the same 8 sequences a step
using P25 = Block<8, Tensor2p5D<2>, Samples>;
using P3 = Block<8, Tensor3D, Samples>;

using Inner = comm::mpi_communicator;
using CW = world<Host, comm::counting<Inner>>;

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct result {
  double ms = 1e300;
  long long counted = 0, planned = 0;  // bytes per step on this rank
  std::array<long long, 7> counted_kind{}, planned_kind{};
};

template <class P>
void run(CW& w, comm::counting<Inner>& books, int steps, result& r) {
  auto t = make_trainer<P, float>(w, Adam{.lr = 1e-3});
  t.check_replicas_every(0);
  const int dp = t.data_parallel();
  const std::size_t n = std::size_t(P::replica_batch);
  std::mt19937 g(7 + unsigned(t.coord().data));
  std::vector<float> x(n * S * D);
  std::vector<std::int32_t> y(n * S);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (auto& v : x) v = u(g);
  for (auto& v : y) v = std::int32_t(g() % D);
  const batch_view<float> batch{.inputs = x, .labels = y, .samples = n};
  for (int i = 0; i < 2; ++i) t.step(batch);
  books.clear();
  t.step(batch);  // one counted step
  r.counted = 0;
  for (std::size_t k = 1; k < 7; ++k) r.counted_kind[k] = books.books().bytes[k], r.counted += r.counted_kind[k];
  const auto table = P::communication_of(t.coord().stage, dp, sizeof(float), sizeof(stat_t<float>), sizeof(float));
  r.planned_kind = {};
  for (int i = 0; i < table.size; ++i)
    r.planned_kind[std::size_t(table.rows[std::size_t(i)].kind)] += table.rows[std::size_t(i)].bytes;
  r.planned_kind[std::size_t(collective::all_reduce)] += P::loss_books_bytes;  // the step's loss, summed
  r.planned = 0;
  for (std::size_t k = 1; k < 7; ++k) r.planned += r.planned_kind[k];
  w.comm().agree(true, "");
  const double t0 = now();
  for (int i = 0; i < steps; ++i) t.step(batch);
  w.comm().agree(true, "");
  r.ms = std::min(r.ms, (now() - t0) * 1e3 / steps);
}

int main(int argc, char** argv) {
  auto base = init<Host>(argc, argv);
  const int steps = argc > 1 ? std::atoi(argv[1]) : 10;
  comm::counting<Inner> counted(base.comm().split(0, base.rank()));
  CW w(nullptr, &counted);
  if (w.size() != 8) {
    if (w.rank() == 0) std::printf("bench_tensor_modes runs on 8 processes (mpiexec -n 8)\n");
    return 1;
  }
  const char* names[] = {"1D  Split<8> (Megatron)", "2D  Split<4>, q=2, x DP2", "2.5D Split<8>, q=2, d=2",
                         "3D  Split<8>, q=2"};
  std::array<result, 4> res{};
  for (int pass = 0; pass < 2; ++pass) {
    run<P1>(w, counted, steps, res[0]);
    run<P2>(w, counted, steps, res[1]);
    run<P25>(w, counted, steps, res[2]);
    run<P3>(w, counted, steps, res[3]);
  }
  // the largest count of any rank (ranks of one mode move different bytes only by who
  // reports the loss)
  std::vector<std::int64_t> mine;
  for (const result& r : res) mine.push_back(r.counted), mine.push_back(r.planned);
  std::vector<std::int64_t> all(mine.size() * std::size_t(w.size()));
  base.comm().all_gather(mine.data(), all.data(), mine.size());
  if (w.rank() == 0) {
    std::printf("GPT block (D %d, %d heads, context %d, float32, Adam), %d sequences per step, 8 processes\n", D, H, S,
                Samples);
    std::printf("%-26s %9s %16s %16s %8s\n", "mode", "ms/step", "bytes counted", "bytes planned", "equal");
    for (std::size_t m = 0; m < res.size(); ++m) {
      long long c = 0, p = 0;
      bool equal = true;
      for (int r = 0; r < w.size(); ++r) {
        const long long rc = all[std::size_t(r) * mine.size() + 2 * m], rp = all[std::size_t(r) * mine.size() + 2 * m + 1];
        c = std::max(c, rc), p = std::max(p, rp);
        equal = equal && rc == rp;
      }
      std::printf("%-26s %9.1f %16lld %16lld %8s\n", names[m], res[m].ms, c, p, equal ? "yes" : "NO");
    }
    std::printf("rank 0 by kind (counted / planned bytes):\n");
    for (std::size_t m = 0; m < res.size(); ++m) {
      std::printf("  %-26s", names[m]);
      for (std::size_t k = 1; k < 7; ++k)
        if (res[m].counted_kind[k] || res[m].planned_kind[k])
          std::printf("  %s %lld/%lld", std::string(to_string(static_cast<collective>(k))).c_str(), res[m].counted_kind[k],
                      res[m].planned_kind[k]);
      std::printf("\n");
    }
  }
  return 0;
}
