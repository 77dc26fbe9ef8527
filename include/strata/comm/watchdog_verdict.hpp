#pragma once
// What a waiting rank says about itself when a watchdog asks, and the two hooks through
// which a communicator's wait loop takes part in a verdict (comm/mpi/verdict.hpp sets them
// when it opens its side channel). Plain C++: the NCCL communicator's watchdog calls the
// hooks without depending on MPI.
#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>

#include "strata/core/position.hpp"

namespace strata::comm::detail {

// A wait in progress, put into words only when a peer asks.
struct wait_site {
  std::string (*describe)(const void* ctx) = nullptr;  // "all_reduce #11 (f32 x 40, sum) on communicator ..."
  const void* ctx = nullptr;
  std::chrono::steady_clock::time_point since{};  // when the wait began
};

// "waits 3.01 s in all_reduce #11 (...) on communicator 'world.data' (rank 0 of 4); step 4:
// stage 0, action 7 of 12 (B1 s1)".
inline std::string wait_status(const wait_site& w) {
  std::string s = "waits";
  if (w.since != std::chrono::steady_clock::time_point{}) {
    char t[32];
    std::snprintf(t, sizeof t, " %.2f s",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - w.since).count());
    s += t;
  }
  s += " in ";
  try {
    s += w.describe ? w.describe(w.ctx) : std::string("an operation");
  } catch (...) {
    s += "an operation";
  }
  return s + "; " + position_text(position());
}

// Set while the MPI side channel is open: a wait loop calls verdict_poll now and then (it
// answers a peer's question, or prints the verdict a peer sent and waits for the end of the
// job); a watchdog that expired calls verdict, which asks every rank where it stands and
// returns `message` followed by the verdict (or never returns: another rank gives it).
inline void (*g_verdict_poll)(const wait_site&) = nullptr;
inline std::string (*g_verdict)(const wait_site&, std::string_view message, std::chrono::milliseconds timeout) =
    nullptr;

}  // namespace strata::comm::detail
