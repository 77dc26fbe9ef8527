#pragma once
// The executor's entries in this rank's position record (core/position.hpp): which lowered
// program runs and which of its actions, with the words for an action when a watchdog's
// verdict names one (also another rank's, read from memory the node shares).
#include <cstddef>
#include <cstdint>
#include <string>

#include "strata/core/position.hpp"
#include "strata/plan/lower.hpp"
#include "strata/plan/print.hpp"

namespace strata::exec {

template <class P>
struct program_position {
  using L = lower::lowered<P>;

  // FNV-1a over the training and evaluation programs' actions: equal on the ranks that run
  // the same programs, whose actions then read the same.
  static std::uint64_t id() {
    static const std::uint64_t h = [] {
      std::uint64_t x = 0xcbf29ce484222325ull;
      auto mix = [&](long long v) { x = (x ^ static_cast<std::uint64_t>(v)) * 0x100000001b3ull; };
      auto add = [&](const auto& prog) {
        for (std::size_t s = 0; s < prog.length.size(); ++s) {
          mix(prog.length[s]);
          for (int i = 0; i < prog.length[s]; ++i) {
            const sched::instr& a = prog.at(static_cast<int>(s), i);
            mix(static_cast<int>(a.kind)), mix(a.mb), mix(a.chunk), mix(a.slot);
          }
        }
      };
      mix(L::chunks);
      add(L::train.prog);
      add(L::eval.prog);
      name_program(x, &name);
      return x;
    }();
    return h;
  }

  // "B1 s1": action `action` of stage `stage`'s training (or evaluation) list.
  static std::string name(int stage, int action, bool evaluation) {
    auto of = [&](const auto& prog) -> std::string {
      const std::size_t s = static_cast<std::size_t>(stage);
      if (stage < 0 || s >= prog.length.size() || action < 0 || action >= prog.length[s]) return "?";
      return action_text(prog.at(stage, action), L::chunks);
    };
    return evaluation ? of(L::eval.prog) : of(L::train.prog);
  }

  // Entering the stage's list (the loop then stores each action's index).
  static void enter(int stage, int actions, bool evaluation) noexcept {
    rank_position& p = position();
    p.program = id();
    p.stage = stage;
    p.actions = actions;
    p.evaluation = evaluation;
    p.in = rank_position::phase::program;
  }
};

}  // namespace strata::exec
