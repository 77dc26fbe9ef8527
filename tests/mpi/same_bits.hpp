// Two plans of one model that must train to the same bits (an option that moves data or
// reorders work, never a value): four steps of the same random batches from the same
// initial weights, then every parameter compared exactly, a line per check on rank 0.
#pragma once
#include <cstdio>
#include <span>
#include <vector>

#include <doctest/doctest.h>
#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>

#include "doctest_world.hpp"

namespace mpi_test {

template <class P, class T>
auto trained(strata::optimizer o) {
  using namespace strata;
  auto t = make_trainer<P, T>(world(), o, 11);
  t.check_replicas_every(1);
  const std::size_t R = std::size_t(P::replica_batch), G = R * std::size_t(t.data_parallel());
  const std::size_t in = std::size_t(P::input_elems), lab = std::size_t(P::labels_per_sample);
  std::vector<master_t<T>> x(G * in);
  std::vector<std::int32_t> y(G * lab);
  const std::size_t first = std::size_t(t.coord().data) * R;
  for (int s = 0; s < 4; ++s) {
    verify::random_data<P>(9)(s, std::span<master_t<T>>(x), std::span<std::int32_t>(y));
    t.step(batch_view<master_t<T>>{.inputs = std::span<const master_t<T>>(x).subspan(first * in, R * in),
                                   .labels = std::span<const std::int32_t>(y).subspan(first * lab, R * lab),
                                   .samples = R});
  }
  return t.gather_parameters();
}

template <class A, class B, class T = double>
void same_bits(const char* tag, const char* name, strata::optimizer o) {
  if (world().size() % A::devices_per_replica != 0) return;
  const bool ok = trained<A, T>(o) == trained<B, T>(o);
  if (world().rank() == 0)
    std::printf("[%s] %-52s world %d  bit-identical: %s\n", tag, name, world().size(), ok ? "yes" : "NO");
  CHECK(ok);
}

}  // namespace mpi_test
