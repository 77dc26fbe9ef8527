#pragma once
// 1F1B (EPL PreferBackward, PipeDream-flush), the default schedule: its builder and its
// tag, Schedule<PreferBackward>.
#include <array>
#include <cstddef>
#include <string_view>

#include "strata/plan/schedule_emit.hpp"

namespace strata::sched {

// 1F1B (EPL PreferBackward): stage s warms up with p−s−1 forwards, then alternates.
template <int P, int M>
constexpr program<P, schedule_capacity(M, 1)> one_f_one_b() {
  program<P, schedule_capacity(M, 1)> prog{};
  prog.micro_batches = M;
  for (int s = 0; s < P; ++s) {
    std::array<detail::work, static_cast<std::size_t>(2 * M)> order{};
    const int warm = (P - s - 1) < M ? (P - s - 1) : M;
    int k = 0;
    for (int i = 0; i < warm; ++i) order[static_cast<std::size_t>(k++)] = {true, i, 0, false};
    for (int i = 0; i < M - warm; ++i) {
      order[static_cast<std::size_t>(k++)] = {true, warm + i, 0, false};
      order[static_cast<std::size_t>(k++)] = {false, i, 0, false};
    }
    for (int i = M - warm; i < M; ++i) order[static_cast<std::size_t>(k++)] = {false, i, 0, false};
    detail::emit_stage(prog, s, order, k);
  }
  return prog;
}

}  // namespace strata::sched

namespace strata {

struct PreferBackward {
  static constexpr std::string_view name = "1F1B (PreferBackward)", label = "1F1B";
  template <int Stages, int M, int Chunks>
  static constexpr auto build() {
    return sched::one_f_one_b<Stages, M>();
  }
  // stage s holds its warm-up depth, p − s; GPipe's bubble
  static constexpr long long in_flight(int p, int m, int s) { return m < p - s ? m : p - s; }
  static constexpr double bubble(int p, double stage_s, double) { return (p - 1) * stage_s; }
};

}  // namespace strata
