// The main job on CPUs: a Llama-style decoder (tied embeddings, RMSNorm, rotary
// grouped-query attention, SwiGLU) trained on SentencePiece BPE tokens of the fortune
// collections with one MPI process per simulated device — 4 processes: two pipeline
// stages, each Split<2> with sequence parallelism, the tied table on both stages.
//   mpiexec -n 4 ./llama_train [steps] [--checkpoint DIR] [--save-every N] [--resume DIR] [--stop-after N]
//                              [--export DIR]
// With one process (no launcher) the same layers run as a single-device plan.
#include "llama_job.hpp"

int main(int argc, char** argv) {
  auto world = strata::init<strata::Host>(argc, argv);
  try {
    return llama_job::run_job(world, argc, argv);
  } catch (const std::exception& e) {
    return world.fail(e);  // agreed errors end every rank normally; any other ends the job
  }
}
