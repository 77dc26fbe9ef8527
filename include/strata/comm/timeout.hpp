#pragma once
// The watchdogs' timeouts, shared by the MPI and NCCL communicators: read from an
// environment variable in seconds (STRATA_MPI_TIMEOUT_S, STRATA_NCCL_TIMEOUT_S) and
// printed back in seconds in their messages.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "strata/core/communicator.hpp"

namespace strata::comm::detail {

// `var` in seconds (fractions allowed, at most 1e8); unset or empty: 300 s. 0 is taken
// only where it turns the watchdog off (zero_off); `expected` words the rule for the error.
inline std::chrono::milliseconds timeout_from_env(const char* var, bool zero_off, std::string_view expected) {
  const char* s = std::getenv(var);
  if (s == nullptr || *s == '\0') return std::chrono::seconds(300);
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  if (end == s || *end != '\0' || !std::isfinite(v) || v < 0.0 || (v == 0.0 && !zero_off) || v > 1e8)
    throw comm_error("strata::comm: " + std::string(var) + "='" + s + "' is not " + std::string(expected));
  return std::chrono::milliseconds(static_cast<long long>(std::ceil(v * 1000.0)));
}

// "300 s", "2.5 s".
inline std::string seconds_text(std::chrono::milliseconds t) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", static_cast<double>(t.count()) / 1000.0);
  return buf;
}

}  // namespace strata::comm::detail
