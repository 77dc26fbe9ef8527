// The main job on CPUs: OneFlow's seed-004 MLP as DESIGN.md's two-stage pipeline,
// trained on Fashion-MNIST with one MPI process per simulated device
// (4 processes: 2 stages × DP 2).
//   mpiexec -n 4 ./fashion_mnist_train [epochs] [fp32|bf16]
// With one process (no launcher) the same layers run as a single-device plan with
// gradient accumulation over the same 4 micro-batches.
#include "fashion_mnist_job.hpp"

int main(int argc, char** argv) {
  using namespace fashion_mnist_job;
  auto world = strata::init<Host>(argc, argv);
  try {
    return run_job(world, argc, argv);
  } catch (const std::exception& e) {
    return world.fail(e);  // agreed errors end every rank normally; any other ends the job
  }
}
