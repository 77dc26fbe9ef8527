// The GPT main job on GPUs: the same plans and loop as gpt_train.cpp on the CUDA backend
// with NCCL — one process per GPU (`mpiexec -n 4`), or one process on one GPU for the
// single-device plan. Arguments: [steps] [--checkpoint DIR] [--save-every N] [--resume DIR] [--stop-after N].
#include <optional>

#include <strata/runtime/cuda_world.hpp>

#include "gpt_job.hpp"

int main(int argc, char** argv) {
  std::optional<decltype(strata::init<strata::Cuda>(argc, argv))> maybe;
  try {
    maybe.emplace(strata::init<strata::Cuda>(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[strata] rank %d: %s\n", strata::backend::cuda::process_rank(), e.what());
    return 1;
  }
  auto& world = *maybe;
  try {
    return gpt_job::run_job(world, argc, argv);
  } catch (const std::exception& e) {
    return world.fail(e);
  }
}
