// One rank stops (SIGSTOP: alive, but never runs again) while the others train; the MPI
// watchdog (STRATA_MPI_TIMEOUT_S) must end the whole job with one verdict that names the
// stopped rank and where it stood, and what every other rank waits for, instead of leaving
// the job hanging until someone kills it from outside.
//   rank_stops MODE [STOPPED_RANK (default 2) [CHECKPOINT_DIR]]
//   layer       data parallel: the rank stops inside its third step's forward; the others
//               wait in the gradient all_reduce
//   between     data parallel: the rank stops between steps 3 and 4; the others wait in the
//               next step's input check (agree)
//   pipeline    2 stages x data parallel: the rank (stage 0) stops inside a forward; its
//               stage 1 waits in the group that receives its activations
//   checkpoint  data parallel: the rank stops inside save_checkpoint after step 3, while it
//               writes its file (its fsync); the others wait in the save's agree
//   crossed     no rank stops: ranks 1 and 2 each wait to receive from the other first (a
//               protocol bug); the verdict must say that every rank answered
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <sys/syscall.h>
#include <unistd.h>

#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

using namespace strata;

int g_rank = -1;
int g_stopped = 2;  // the rank that stops
bool g_stop_in_forward = false;
bool g_stop_in_fsync = false;

[[noreturn]] void stop_here(const char* where) {
  std::printf("rank %d: stopping (SIGSTOP) %s\n", g_rank, where);
  std::fflush(stdout);
  std::raise(SIGSTOP);
  // Only a SIGCONT gets here: Open MPI's mpirun sends one before its SIGTERM when it
  // ends the job. The peers are gone; this rank must not go back into MPI.
  std::fprintf(stderr, "rank %d: continued by SIGCONT; exiting\n", g_rank);
  std::_Exit(3);
}

// The checkpoint's files are fsynced before they are renamed (io/file.hpp): this program's
// own fsync stops the chosen rank there, inside save_checkpoint.
extern "C" int fsync(int fd) {
  if (g_stop_in_fsync && g_rank == g_stopped) stop_here("inside save_checkpoint (the fsync of its file)");
  return static_cast<int>(::syscall(SYS_fsync, fd));
}

// y = x; on the chosen rank its third forward stops the process.
template <int D>
struct Stall {
  static constexpr std::string_view name = "Stall";
  static constexpr layer_role role = layer_role::opaque;
  static constexpr shape_t in_shape = shape_v<D>;
  static constexpr shape_t out_shape(shape_t in) { return in; }
  static constexpr std::array<param_t, 0> params{};
  static constexpr long long forward_flops(shape_t) { return 0; }
  static constexpr long long backward_flops(shape_t) { return 0; }
  static constexpr buffer_needs memory(const local_dims&) { return {}; }
  template <class C>
  static void forward(C& c) {
    static int calls = 0;
    if (g_stop_in_forward && g_rank == g_stopped && ++calls >= 3) stop_here("inside forward");
    copy(c.q, c.rows * c.in_cols, c.x, c.y);
  }
  template <class C>
  static void backward(C& c) {
    if (c.dx) copy(c.q, c.rows * c.in_cols, c.dy, c.dx);
  }
};

using DataParallel =
    Plan<Replicate<1, Linear<8, 16>, Stall<16>, ReLU, Linear<16, 4>>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>>;
using TwoStages = Plan<Pipeline<Replicate<1, Linear<8, 16>, Stall<16>, ReLU>, Replicate<1, Linear<16, 4>>>,
                       Loss<SoftmaxCrossEntropy>, MicroBatch<4>, NumMicroBatch<2>>;

template <class P>
void train(strata::world<Host, comm::mpi_communicator>& world, std::string_view mode, const std::string& dir) {
  auto t = make_trainer<P, float>(world, SGD{});
  const std::size_t samples = std::size_t(P::micro_batch) * P::num_micro_batch;
  std::vector<float> x(samples * 8, 0.5f);
  std::vector<std::int32_t> y(samples, 1);
  for (int s = 0; s < 100; ++s) {
    if (s == 3 && mode == "between" && world.rank() == g_stopped) stop_here("between steps");
    if (s == 3 && mode == "checkpoint") {
      g_stop_in_fsync = true;
      t.save_checkpoint(dir);
    }
    t.step({.inputs = x, .labels = y, .samples = samples});
  }
}

int main(int argc, char** argv) {
  auto world = strata::init<Host>(argc, argv);
  g_rank = world.rank();
  const std::string_view mode = argc > 1 ? argv[1] : "";
  if (argc > 2) g_stopped = std::atoi(argv[2]);
  const std::string dir = argc > 3 ? argv[3] : "rank_stops_checkpoint";
  g_stop_in_forward = mode == "layer" || mode == "pipeline";
  try {
    if (mode == "crossed") {
      comm::mpi_communicator& c = world.comm();
      float v = 0;
      if (c.rank() == 1 || c.rank() == 2) c.recv(&v, 1, 3 - c.rank(), 7);
      c.barrier();
    } else if (mode == "pipeline")
      train<TwoStages>(world, mode, dir);
    else
      train<DataParallel>(world, mode, dir);
    std::printf("rank %d: trained 100 steps; the watchdog never fired\n", world.rank());
    return 0;
  } catch (const std::exception& e) {
    return world.fail(e);
  }
}
