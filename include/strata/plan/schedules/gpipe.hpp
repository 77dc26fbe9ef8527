#pragma once
// GPipe (EPL PreferForward): its builder and its tag, Schedule<PreferForward>.
#include <array>
#include <cstddef>
#include <string_view>

#include "strata/plan/schedule_emit.hpp"

namespace strata::sched {

// GPipe (EPL PreferForward): all forwards, then all backwards.
template <int P, int M>
constexpr program<P, schedule_capacity(M, 1)> gpipe() {
  program<P, schedule_capacity(M, 1)> prog{};
  prog.micro_batches = M;
  for (int s = 0; s < P; ++s) {
    std::array<detail::work, static_cast<std::size_t>(2 * M)> order{};
    for (int i = 0; i < M; ++i) {
      order[static_cast<std::size_t>(i)] = {true, i, 0, false};
      order[static_cast<std::size_t>(M + i)] = {false, i, 0, false};
    }
    detail::emit_stage(prog, s, order, 2 * M);
  }
  return prog;
}

}  // namespace strata::sched

namespace strata {

struct PreferForward {
  static constexpr std::string_view name = "GPipe (PreferForward)", label = "GPipe";
  template <int Stages, int M, int Chunks>
  static constexpr auto build() {
    return sched::gpipe<Stages, M>();
  }
  // every micro-batch is in flight before the first backward; the pipeline fills and
  // drains once: p − 1 micro-batches of the slowest stage
  static constexpr long long in_flight(int, int m, int) { return m; }
  static constexpr double bubble(int p, double stage_s, double) { return (p - 1) * stage_s; }
};

}  // namespace strata
