// A short multi-rank training (PP2 x DP2 on 4 ranks, float64, SGD with momentum) that
// reports where each rank landed and every step's loss. tests/slurm/run_slurm_test.sh
// runs it under `srun -n 4` on a one-node Slurm and under `mpiexec -n 4`, and compares.
//
// Each rank prints `layout rank R size N slurm_procid P slurm_ntasks T slurm_localid L
// threads H`; under Slurm the program itself checks that MPI's rank and size are
// Slurm's. Rank 0 then prints `loss step S <value>` with 17 digits.
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Pipeline<Replicate<1, Linear<16, 32>, ReLU>, Replicate<1, Linear<32, 32>, GeLU, Linear<32, 4>>>,
               Loss<SoftmaxCrossEntropy>, MicroBatch<4>, NumMicroBatch<4>, Schedule<PreferBackward>>;

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : -1;
}

int main(int argc, char** argv) {
  auto world = init<Host>(argc, argv);
  const int procid = env_int("SLURM_PROCID"), ntasks = env_int("SLURM_NTASKS");
  std::printf("layout rank %d size %d slurm_procid %d slurm_ntasks %d slurm_localid %d threads %u\n", world.rank(),
              world.size(), procid, ntasks, env_int("SLURM_LOCALID"), world.queue().threads());
  std::fflush(stdout);
  // Under srun the rank layout must be Slurm's: MPI's rank is the task id.
  const bool under_slurm = procid >= 0;
  world.comm().agree(!under_slurm || (procid == world.rank() && ntasks == world.size()),
                     "rank " + std::to_string(world.rank()) + " of " + std::to_string(world.size()) +
                         " does not match SLURM_PROCID " + std::to_string(procid) + " of SLURM_NTASKS " +
                         std::to_string(ntasks));

  auto train = make_trainer<P, double>(world, SGD{.lr = 0.1, .momentum = 0.9}, /*seed=*/11);
  const int dp = train.data_parallel(), replica = train.coord().data;
  const std::size_t per_replica = std::size_t(P::micro_batch) * P::num_micro_batch;
  std::vector<double> x(per_replica * dp * 16);
  std::vector<std::int32_t> y(per_replica * dp);
  for (int step = 0; step < 6; ++step) {
    std::mt19937_64 g(100 + step);
    std::normal_distribution<double> nd;
    for (auto& v : x) v = nd(g);
    for (auto& v : y) v = static_cast<std::int32_t>(g() % 4);
    const step_result r = train.step({.inputs = std::span<const double>(x).subspan(replica * per_replica * 16, per_replica * 16),
                                      .labels = std::span<const std::int32_t>(y).subspan(replica * per_replica, per_replica),
                                      .samples = per_replica});
    if (world.rank() == 0) std::printf("loss step %d %.17g\n", step, r.loss);
  }
  return 0;
}
