// One rank stops (SIGSTOP: alive, but never runs again) while the others train; the MPI
// watchdog (STRATA_MPI_TIMEOUT_S) must end the whole job, naming the operation the others
// waited in, instead of leaving it hanging until someone kills it from outside.
//   layer     data parallel 4: rank 2 stops inside its third step's forward; the others
//             wait in the gradient all_reduce
//   between   data parallel 4: rank 2 stops between steps; the others wait in the next
//             step's input check (agree)
//   pipeline  2 stages x data parallel 2: rank 2 (stage 0) stops inside a forward; rank 3
//             (its stage 1) waits in the group that receives rank 2's activations
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

using namespace strata;

int g_rank = -1;
bool g_stop_in_forward = false;

[[noreturn]] void stop_here(const char* where) {
  std::printf("rank %d: stopping (SIGSTOP) %s\n", g_rank, where);
  std::fflush(stdout);
  std::raise(SIGSTOP);
  // Only a SIGCONT gets here: Open MPI's mpirun sends one before its SIGTERM when it
  // ends the job. The peers are gone; this rank must not go back into MPI.
  std::fprintf(stderr, "rank %d: continued by SIGCONT; exiting\n", g_rank);
  std::_Exit(3);
}

// y = x; on rank 2 its third forward stops the process.
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
    if (g_stop_in_forward && g_rank == 2 && ++calls >= 3) stop_here("inside forward");
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
void train(strata::world<Host, comm::mpi_communicator>& world, bool stop_between) {
  auto t = make_trainer<P, float>(world, SGD{});
  const std::size_t samples = std::size_t(P::micro_batch) * P::num_micro_batch;
  std::vector<float> x(samples * 8, 0.5f);
  std::vector<std::int32_t> y(samples, 1);
  for (int s = 0; s < 100; ++s) {
    if (stop_between && s == 3 && world.rank() == 2) stop_here("between steps");
    t.step({.inputs = x, .labels = y, .samples = samples});
  }
}

int main(int argc, char** argv) {
  auto world = strata::init<Host>(argc, argv);
  g_rank = world.rank();
  const std::string_view mode = argc > 1 ? argv[1] : "";
  g_stop_in_forward = mode == "layer" || mode == "pipeline";
  try {
    if (mode == "pipeline")
      train<TwoStages>(world, false);
    else
      train<DataParallel>(world, mode == "between");
    std::printf("rank %d: trained 100 steps; the watchdog never fired\n", world.rank());
    return 0;
  } catch (const std::exception& e) {
    return world.fail(e);
  }
}
