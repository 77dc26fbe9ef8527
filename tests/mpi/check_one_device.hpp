// One multi-rank equality check for the MPI tests: plan P trained on the world in T
// against its one-device reference in R (strata::verify::against_one_device), a line
// per check on rank 0, and every verdict the verifier gives asserted.
#pragma once
#include <cstdio>

#include <doctest/doctest.h>
#include <strata/runtime/verify.hpp>

#include "doctest_world.hpp"

namespace mpi_test {

template <class P, class T = double, class R = T>
void check_one_device(const char* tag, const char* name, strata::optimizer opt, double tol, int steps,
                      const strata::training_options& topts = {}) {
  auto& w = world();
  if (w.size() % P::devices_per_replica != 0) return;
  const strata::verify::report r =
      strata::verify::against_one_device<P, T, R>(w, opt, steps, strata::verify::random_data<P>(), tol, 0x5eed, topts);
  if (w.rank() == 0)
    std::printf("[%s] %-44s world %d  worst loss rel %.3e  worst param rel %.3e  eval %.3e\n", tag, name, w.size(),
                r.worst_loss, r.worst_param, r.worst_eval);
  if (!r.ok()) std::printf("rank %d: %s", w.rank(), r.text().c_str());
  CHECK(r.ok());
  CHECK(r.worst_loss <= tol);
  CHECK(r.worst_param <= tol);
  CHECK(r.bytes_as_planned);
  CHECK(r.replicas.identical);
}

}  // namespace mpi_test
