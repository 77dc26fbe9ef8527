// What a checkpoint every N steps costs the step time, saved synchronously and in the
// background (trainer::save_checkpoint_async, exec/checkpoint_async.hpp): the GPT of
// bench_options (4 blocks, D 128, context 128, float32, AdamW, ~0.9 M parameters plus
// state) as 2 MPI processes of data parallelism with ZeRO-1 (so the save gathers), in one
// run: no saves, a synchronous save every N steps, an asynchronous one every N steps;
// alternating passes, each mode's best pass, as ms/step and the ratio to no saves, and
// the time each save call keeps training waiting (async: the snapshot only). The background
// write needs a core the ranks do not use: with every core computing it slows the steps.
// `mpiexec -n 2 bench_checkpoint [steps per pass] [N] [dir]`.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

using namespace strata;

constexpr int V = 256, S = 128, D = 128, H = 4, Blocks = 4, B = 8;
using Attn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>;
using MLP = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;
using GPT = Plan<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, Repeat<Blocks, Attn, MLP>, LayerNorm<D>, Linear<D, V>>,
                 Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<B>, Zero<1>>;
using W = world<Host, comm::mpi_communicator>;

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

enum class mode { none, sync, async };

struct timing {
  double step_ms = 0;   // per step, saves and the final join included
  double stall_ms = 0;  // per save: inside the save call (async: the snapshot; the join of the previous save)
};

timing run_pass(W& w, mode m, int steps, int every, const std::string& dir) {
  auto t = make_trainer<GPT>(w, AdamW{.lr = 1e-3, .weight_decay = 0.01});
  std::mt19937 g(1 + unsigned(w.rank()));
  std::vector<float> x(std::size_t(S) * B);
  std::vector<std::int32_t> y(std::size_t(S) * B);
  for (auto& v : x) v = float(g() % V);
  for (auto& v : y) v = std::int32_t(g() % V);
  const batch_view<float> batch{.inputs = x, .labels = y, .samples = std::size_t(B)};
  for (int i = 0; i < 3; ++i) t.step(batch);
  w.comm().agree(true, "");
  const double t0 = now();
  double stall = 0;
  int saves = 0;
  for (int i = 1; i <= steps; ++i) {
    t.step(batch);
    if (i % every != 0 || m == mode::none) continue;
    const double s0 = now();
    if (m == mode::sync) t.save_checkpoint(dir);
    if (m == mode::async) t.save_checkpoint_async(dir);
    stall += now() - s0;
    ++saves;
  }
  t.wait_for_checkpoint();  // the last save's commit counts too
  w.comm().agree(true, "");
  return {(now() - t0) * 1e3 / steps, saves ? stall * 1e3 / saves : 0.0};
}

int main(int argc, char** argv) {
  auto w = init<Host>(argc, argv);
  const int steps = argc > 1 ? std::atoi(argv[1]) : 40;
  const int every = argc > 2 ? std::atoi(argv[2]) : 5;
  const std::string dir = argc > 3 ? argv[3] : (std::filesystem::temp_directory_path() / "strata_bench_ckpt").string();
  timing best[3] = {{1e300, 0}, {1e300, 0}, {1e300, 0}};
  for (int p = 0; p < 3; ++p)
    for (mode m : {mode::none, mode::sync, mode::async}) {
      const timing t = run_pass(w, m, steps, every, dir);
      if (t.step_ms < best[int(m)].step_ms) best[int(m)] = t;
    }
  if (w.rank() == 0) {
    const auto bytes = std::filesystem::file_size(dir + "/rank-00000-of-00002.safetensors") +
                       std::filesystem::file_size(dir + "/rank-00001-of-00002.safetensors");
    std::printf("GPT (4 blocks, D %d, context %d), DP2 ZeRO-1, float32 AdamW; a save every %d steps "
                "(%.1f MB of files), %d steps per pass, best of 3 passes\n",
                D, S, every, double(bytes) / 1e6, steps);
    const char* names[3] = {"no saves", "synchronous save", "asynchronous save"};
    for (int m = 0; m < 3; ++m)
      std::printf("%-20s %8.2f ms/step  x%.3f   %8.2f ms in each save call\n", names[m], best[m].step_ms,
                  best[m].step_ms / best[0].step_ms, best[m].stall_ms);
    const double sync = best[1].step_ms - best[0].step_ms, async = best[2].step_ms - best[0].step_ms;
    std::printf("save cost per step: synchronous %.2f ms, asynchronous %.2f ms (async/sync %.2f); "
                "the save call blocks training %.2f ms sync, %.2f ms async (async/sync %.2f)\n",
                sync, async, async / std::max(sync, 1e-9), best[1].stall_ms, best[2].stall_ms,
                best[2].stall_ms / std::max(best[1].stall_ms, 1e-9));
    std::filesystem::remove_all(dir);
  }
}
