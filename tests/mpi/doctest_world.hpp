// The main of a doctest program under mpiexec: every rank runs the test cases on the
// MPI world (reachable as mpi_test::world()), rank 0 prints, and every rank exits with
// the worst result of all, so a check that fails on one rank fails the test.
#pragma once
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <strata/runtime/host.hpp>

namespace mpi_test {

inline strata::world<strata::Host, strata::comm::mpi_communicator>*& world_slot() {
  static strata::world<strata::Host, strata::comm::mpi_communicator>* w = nullptr;
  return w;
}
inline strata::world<strata::Host, strata::comm::mpi_communicator>& world() { return *world_slot(); }

}  // namespace mpi_test

int main(int argc, char** argv) {
  auto w = strata::init<strata::Host>(argc, argv);
  mpi_test::world_slot() = &w;
  doctest::Context ctx(argc, argv);
  if (w.rank() != 0) ctx.setOption("out", "/dev/null");
  int rc = ctx.run();
  w.comm().all_reduce(&rc, 1, strata::comm::reduce_op::max);
  return rc;
}
