// The main job on GPUs: the same plans and loop as fashion_mnist_train.cpp, on the CUDA
// backend with NCCL — one process per GPU (`mpiexec -n 2` for the two-stage pipeline,
// or one process on one GPU for the single-device plan). Each step after the first is
// a replayed CUDA graph. Arguments: [epochs] [fp32|bf16] (bf16: mixed precision).
#include <optional>

#include <strata/runtime/cuda_world.hpp>

#include "fashion_mnist_job.hpp"

int main(int argc, char** argv) {
  using namespace fashion_mnist_job;
  std::optional<decltype(strata::init<Cuda>(argc, argv))> maybe;
  try {
    maybe.emplace(strata::init<Cuda>(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[strata] rank %d: %s\n", backend::cuda::process_rank(), e.what());
    return 1;
  }
  auto& world = *maybe;
  try {
    return run_job(world, argc, argv);
  } catch (const std::exception& e) {
    return world.fail(e);  // agreed errors end every rank normally; any other ends the job
  }
}
