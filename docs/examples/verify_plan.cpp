// The first thing to run on a new plan: train it on the world you launch and the same
// layers on one device, and compare every loss, parameter and byte.
//   mpicxx -std=c++20 -O2 -Iinclude -DSTRATA_WITH_MPI verify_plan.cpp -o verify_plan -lopenblas
//   mpiexec -n 8 ./verify_plan          (any multiple of the 4 devices a replica uses)
// mpi-ranks: 4 8
#include <cstdio>
#include <exception>

#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>
using namespace strata;

using P = Plan<Pipeline<Split<2, Linear<16, 64>, GeLU, Linear<64, 16>>, Split<2, Linear<16, 64>, ReLU, Linear<64, 8>>>,
               Loss<SoftmaxCrossEntropy>, MicroBatch<4>, NumMicroBatch<4>, Element<double>>;

int main(int argc, char** argv) {
  auto world = strata::init<Host>(argc, argv);
  try {
    const auto r = verify::against_one_device<P>(world, Adam{.lr = 1e-2}, 10, verify::random_data<P>());
    if (world.rank() == 0) std::printf("%s", r.text().c_str());
    return r.ok() ? 0 : 1;
  } catch (const std::exception& e) {
    return world.fail(e);
  }
}
