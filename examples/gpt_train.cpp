// The main job on CPUs: a byte-level GPT (4 pre-LN blocks, causal attention) trained on
// the fortune collections with one MPI process per simulated device — 4 processes: two
// pipeline stages, each Split<2> with sequence parallelism.
//   mpiexec -n 4 ./gpt_train [steps] [--checkpoint DIR] [--save-every N] [--async-save] [--resume DIR]
//                            [--stop-after N]
// With one process (no launcher) the same layers run as a single-device plan.
#include "gpt_job.hpp"

int main(int argc, char** argv) {
  auto world = strata::init<strata::Host>(argc, argv);
  try {
    return gpt_job::run_job(world, argc, argv);
  } catch (const std::exception& e) {
    return world.fail(e);  // agreed errors end every rank normally; any other ends the job
  }
}
