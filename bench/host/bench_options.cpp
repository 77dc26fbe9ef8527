// What the training options cost on the host: the main job's GPT (4 blocks, D 128,
// context 128, float32, AdamW) as 2 MPI processes of data parallelism, 8 sequences per
// replica, and the same step with each option on, in one run: the ratio of each step
// time to the plain step's (alternating passes, each option's best pass). Then a
// checkpoint's save and load against the bandwidth of writing and reading the same bytes
// with plain file I/O (write + fsync, read) measured in the same run.
// `mpiexec -n 2 bench_options [steps]`.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

using namespace strata;

constexpr int V = 256, S = 128, D = 128, H = 4, Blocks = 4, B = 8;
using Attn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>;
using MLP = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;
template <class... O>
using GPT = Plan<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, Repeat<Blocks, Attn, MLP>, LayerNorm<D>, Linear<D, V>>,
                 Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<B>, O...>;

// the same GPT with one TaskGraph per block (the granularity ZeRO-3 gathers at)
using Blk = Replicate<1, Attn, MLP>;
template <class... O>
using GPTB = Plan<Colocate<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>>, Blk, Blk, Blk, Blk,
                           Replicate<1, LayerNorm<D>, Linear<D, V>>>,
                  Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<B>, O...>;
static_assert(GPTB<>::num_taskgraphs == 2 + Blocks);

using W = world<Host, comm::mpi_communicator>;

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

template <class P, class T = float>
double step_ms(W& w, int steps, const training_options& o = {}) {
  auto t = make_trainer<P, T>(w, AdamW{.lr = 1e-3, .weight_decay = 0.01});
  t.set_training_options(o);
  std::mt19937 g(1 + unsigned(w.rank()));
  std::vector<float> x(std::size_t(S) * B);
  std::vector<std::int32_t> y(std::size_t(S) * B);
  for (auto& v : x) v = float(g() % V);
  for (auto& v : y) v = std::int32_t(g() % V);
  const batch_view<float> batch{.inputs = x, .labels = y, .samples = std::size_t(B)};
  for (int i = 0; i < 3; ++i) t.step(batch);
  w.comm().agree(true, "");
  const double t0 = now();
  for (int i = 0; i < steps; ++i) t.step(batch);
  w.comm().agree(true, "");
  return (now() - t0) * 1e3 / steps;
}

int main(int argc, char** argv) {
  auto w = init<Host>(argc, argv);
  const int steps = argc > 1 ? std::atoi(argv[1]) : 10;
  const training_options recipe{.schedule = {.kind = lr_schedule::decay::cosine, .warmup = 10, .total = 1000},
                                .decay = decay_on::matrices,
                                .clip_norm = 1.0};
  struct row {
    const char* name;
    double best = 1e300;
  };
  std::vector<row> rows = {{"plain DP2"},
                           {"Zero<1>"},
                           {"HalfGradientReduce<128>"},
                           {"Offload<weights>"},
                           {"Offload<weights_and_state> + ApplyGroups<4>"},
                           {"schedule + decay groups + clipping"},
                           {"bf16"},
                           {"bf16 + CastWeightsPerUse"},
                           {"plain DP2, a TaskGraph per block"},
                           {"Zero<2>, a TaskGraph per block"},
                           {"Zero<3>, a TaskGraph per block"}};
  for (int pass = 0; pass < 2; ++pass) {
    auto keep = [&](std::size_t i, double ms) { rows[i].best = std::min(rows[i].best, ms); };
    keep(0, step_ms<GPT<>>(w, steps));
    keep(1, step_ms<GPT<Zero<1>>>(w, steps));
    keep(2, step_ms<GPT<HalfGradientReduce<128>>>(w, steps));
    keep(3, step_ms<GPT<Offload<offload_level::weights>>>(w, steps));
    keep(4, step_ms<GPT<Offload<offload_level::weights_and_state>, ApplyGroups<4>>>(w, steps));
    keep(5, step_ms<GPT<>>(w, steps, recipe));
    keep(6, step_ms<GPT<>, bf16>(w, steps));
    keep(7, step_ms<GPT<CastWeightsPerUse>, bf16>(w, steps));
    keep(8, step_ms<GPTB<>>(w, steps));
    keep(9, step_ms<GPTB<Zero<2>>>(w, steps));
    keep(10, step_ms<GPTB<Zero<3>>>(w, steps));
  }
  if (w.rank() == 0) {
    std::printf("GPT (4 blocks, D 128, context 128), %d MPI processes of DP, %d sequences each, %d steps per pass\n",
                w.size(), B, steps);
    std::printf("  %-46s %10s %10s\n", "option", "ms/step", "vs plain");
    for (const row& r : rows) std::printf("  %-46s %10.1f %9.2fx\n", r.name, r.best, r.best / rows[0].best);
    // what each ZeRO level keeps per device (the memory analysis; float32, Adam)
    const int dp = w.size();
    auto mem = [&]<class P>(const char* name, P*) {
      std::printf("  %-22s params %6.2f MB  grads %6.2f MB  Adam state %6.2f MB\n", name, P::parameter_bytes(0, dp) / 1e6,
                  P::gradient_bytes(0, dp) / 1e6, P::adam_state_bytes(0, dp) / 1e6);
    };
    std::printf("per device, a TaskGraph per block, dp %d:\n", dp);
    mem("no ZeRO", static_cast<GPTB<>*>(nullptr));
    mem("Zero<1>", static_cast<GPTB<Zero<1>>*>(nullptr));
    mem("Zero<2>", static_cast<GPTB<Zero<2>>*>(nullptr));
    mem("Zero<3>", static_cast<GPTB<Zero<3>>*>(nullptr));
  }

  // checkpoints: save + load against plain file I/O of the same bytes
  const std::string dir = "bench_options_checkpoint";
  auto t = make_trainer<GPT<Zero<1>>>(w, AdamW{});
  double save = 1e300, load = 1e300;
  for (int i = 0; i < 3; ++i) {
    w.comm().agree(true, "");
    double t0 = now();
    t.save_checkpoint(dir);
    save = std::min(save, now() - t0);
    t0 = now();
    t.load_checkpoint(dir);
    w.comm().agree(true, "");
    load = std::min(load, now() - t0);
  }
  std::uintmax_t bytes = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir)) bytes += std::filesystem::file_size(f.path());
  // plain I/O of one rank's share, on every rank at once
  const std::size_t mine = std::size_t(bytes / std::uintmax_t(w.size()));
  std::vector<char> buf(mine, 'x');
  const std::string f = dir + ".raw." + std::to_string(w.rank());
  double wr = 1e300, rd = 1e300;
  for (int i = 0; i < 3; ++i) {
    w.comm().agree(true, "");
    double t0 = now();
    const int fd = ::open(f.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (::write(fd, buf.data(), buf.size()) != static_cast<ssize_t>(buf.size())) return 1;
    ::fsync(fd);
    ::close(fd);
    w.comm().agree(true, "");
    wr = std::min(wr, now() - t0);
    t0 = now();
    std::ifstream(f, std::ios::binary).read(buf.data(), std::streamsize(buf.size()));
    w.comm().agree(true, "");
    rd = std::min(rd, now() - t0);
  }
  std::filesystem::remove(f);
  w.comm().agree(true, "");
  if (w.rank() == 0) {
    std::filesystem::remove_all(dir);
    const double mb = double(bytes) / 1e6;
    std::printf("checkpoint of %.1f MB (parameters + Adam state, %d files + index)\n", mb, w.size());
    std::printf("  save %.1f ms (%.0f MB/s) vs write + fsync of the same bytes %.1f ms: %.2fx\n", save * 1e3, mb / save,
                wr * 1e3, save / wr);
    std::printf("  load %.1f ms (%.0f MB/s) vs reading the same bytes %.1f ms: %.2fx\n", load * 1e3, mb / load, rd * 1e3,
                load / rd);
  }
  return 0;
}
