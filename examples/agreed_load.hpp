// Reading input files in a multi-process job: every rank reads; if any rank fails, every
// rank throws the same agreed_error naming that rank's problem, so a file missing on one
// node ends the job on all of them instead of leaving the others in a collective.
#pragma once
#include <exception>
#include <string>
#include <utility>

#include <strata/core/communicator.hpp>
#include <strata/core/agreed_error.hpp>

namespace examples {

template <class World, class Load>
auto agreed_load(World& world, Load&& load) {
  decltype(load()) value{};
  std::string problem;
  try {
    value = std::forward<Load>(load)();
  } catch (const std::exception& e) {
    problem = e.what();
  }
  try {
    world.comm().agree(problem.empty(), problem);
  } catch (const strata::comm::agreement_error& e) {
    throw strata::agreed_error(e.what());
  }
  return value;
}

}  // namespace examples
