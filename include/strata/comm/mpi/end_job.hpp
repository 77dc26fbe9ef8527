// strata-header: mpi
#pragma once
// Ending every rank of an MPI job from one rank: fail_all (what the watchdog and
// world::abort call) and the std::terminate handler that turns an exception escaping
// main on one rank into the same.
#include "strata/comm/mpi/types.hpp"  // <mpi.h> without the C++ bindings

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

namespace strata::comm {

// This process's rank as its launcher numbered it (Open MPI, MPICH/PMI, PMIx, Slurm), for
// messages printed where MPI cannot say (not initialised, or finalised); -1 if none says.
inline int launcher_rank() noexcept {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (const char* s = std::getenv(v)) {
      char* end = nullptr;
      const long r = std::strtol(s, &end, 10);
      if (end != s && *end == '\0' && r >= 0 && r < (1L << 30)) return static_cast<int>(r);
    }
  return -1;
}

// A setting refused while the world is being created (STRATA_MPI_TIMEOUT_S): there is no
// communicator to agree through yet, and every rank reads the same setting, so every rank
// exits with status 1, as after an agreed error — no abort, no stack dump — and the
// launcher's rank 0 (or a process no launcher numbered) prints "[strata] all ranks: message".
// MPI_Finalize comes after the message: the ranks meet there, so none exits (and has the
// launcher end the job) before rank 0 has printed.
[[noreturn]] inline void exit_before_world(std::string_view message) noexcept {
  if (launcher_rank() <= 0) {
    std::fprintf(stderr, "[strata] all ranks: %.*s\n", static_cast<int>(message.size()), message.data());
    std::fflush(stderr);
  }
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Finalize();
  std::exit(1);
}

// Prints "[strata] rank R: message" and takes every rank down with MPI_Abort.
// For a rank that finds bad input on its own: throwing there would leave the
// other ranks blocked in their next collective forever.
[[noreturn]] inline void fail_all(std::string_view message) noexcept {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  const bool live = init && !fin;
  int rank = launcher_rank();
  if (live) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "[strata] rank %d: %.*s\n", rank, static_cast<int>(message.size()),
               message.data());
  std::fflush(stderr);
  if (live) MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);  // MPI_Abort does not return; this covers "no MPI running"
}

// Installs a std::terminate handler that names the exception escaping main and ends
// every rank (fail_all): an uncaught exception on one rank must not leave the others
// inside a collective. Installed once, by strata::init.
inline void end_job_on_terminate() noexcept {
  static const bool installed = [] {
    std::set_terminate([]() noexcept {
      std::string what = "terminate called without an active exception";
      if (const std::exception_ptr e = std::current_exception()) {
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& x) {
          what = std::string("uncaught exception: ") + x.what();
        } catch (...) {
          what = "uncaught exception of a type not derived from std::exception";
        }
      }
      fail_all(what + " (ending every rank)");
    });
    return true;
  }();
  (void)installed;
}

}  // namespace strata::comm
