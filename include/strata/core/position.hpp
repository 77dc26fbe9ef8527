#pragma once
// Where this rank stands in its program: the trainer call it is in, the step, and while the
// lowered program runs, the stage's action. The trainer and the executor keep it current
// with plain stores (a few per action); it is put into words only when a watchdog asks
// (comm/watchdog_verdict.hpp), so that a timeout can say where every rank stood.
//
// The record is plain data at a fixed layout: the MPI side channel moves it into memory its
// node's ranks share (comm/mpi/verdict.hpp), where a rank can still read it after its owner
// stopped. Hence no pointers in it: an action is named through `program`, a fingerprint of
// the lowered program, and the table of programs this process knows (name_program).
#include <array>
#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <string_view>

namespace strata {

struct rank_position {
  enum class phase : std::uint8_t { none, input_check, program, books, update };
  char call[24] = {};   // the trainer call running ("step", "save_checkpoint"); empty outside one
  long long steps = 0;  // steps done when that call began
  std::uint64_t program = 0;  // the lowered program running (its fingerprint), while in_program
  int stage = -1;
  int action = -1;   // index into the stage's action list
  int actions = 0;   // the list's length
  phase in = phase::none;
  bool evaluation = false;
};

namespace detail {
inline rank_position g_own_position{};
// Where this process keeps its record (moved into shared memory by the MPI side channel).
inline rank_position* g_position = &g_own_position;

// The lowered programs this process runs, by fingerprint, with a function naming an action
// (stage, index, evaluation or training list).
using action_namer = std::string (*)(int stage, int action, bool evaluation);
struct named_program {
  std::uint64_t id = 0;
  action_namer name = nullptr;
};
inline std::array<named_program, 16> g_programs{};
}  // namespace detail

// This rank's record (trainer, executor).
inline rank_position& position() noexcept { return *detail::g_position; }

// Keeps this rank's record at `where` (room for a rank_position, aligned for it: the MPI side
// channel's shared memory), or back in the process when null; the record moves along.
inline void place_position(void* where) noexcept {
  rank_position* to = where ? static_cast<rank_position*>(where) : &detail::g_own_position;
  if (to == detail::g_position) return;
  detail::g_position = ::new (to) rank_position(*detail::g_position);  // `to` is elsewhere: a plain copy
}

// Makes a program's actions nameable in a verdict; a full table drops the newcomer (its
// actions are then named by number only).
inline void name_program(std::uint64_t id, detail::action_namer f) noexcept {
  for (detail::named_program& p : detail::g_programs) {
    if (p.id == id) return;
    if (p.id == 0) {
      p = {id, f};
      return;
    }
  }
}

// Enters and leaves a trainer call (RAII): its name, and the steps done, read from the
// trainer's counter on entry and again on leaving.
class position_call {
 public:
  position_call(std::string_view call, const long long& steps) noexcept : steps_(steps) {
    rank_position& p = position();
    const std::size_t n = call.size() < sizeof p.call - 1 ? call.size() : sizeof p.call - 1;
    for (std::size_t i = 0; i < sizeof p.call; ++i) p.call[i] = i < n ? call[i] : '\0';
    p.steps = steps;
    p.in = rank_position::phase::none;
  }
  position_call(const position_call&) = delete;
  position_call& operator=(const position_call&) = delete;
  ~position_call() {
    rank_position& p = position();
    p.call[0] = '\0';
    p.steps = steps_;
    p.in = rank_position::phase::none;
  }

 private:
  const long long& steps_;
};

// "in step 4 at stage 0, action 7 of 12 (B1 s1)", "in save_checkpoint after step 3",
// "outside the trainer's calls, after step 3".
inline std::string position_text(const rank_position& p) {
  const std::string_view call(p.call, [&] {
    std::size_t n = 0;
    while (n < sizeof p.call && p.call[n] != '\0') ++n;
    return n;
  }());
  if (call.empty())
    return p.steps == 0 ? "outside the trainer's calls, before the first step"
                        : "outside the trainer's calls, after step " + std::to_string(p.steps);
  std::string s = call == "step" ? "in step " + std::to_string(p.steps + 1)
                                 : "in " + std::string(call) + " after step " + std::to_string(p.steps);
  switch (p.in) {
    case rank_position::phase::none: return s;
    case rank_position::phase::input_check: return s + ", checking the batch";
    case rank_position::phase::books: return s + ", after its stage's program (the loss's all-reduce)";
    case rank_position::phase::update: return s + ", in the update";
    case rank_position::phase::program: break;
  }
  s += " at stage " + std::to_string(p.stage) + ", action " + std::to_string(p.action) + " of " +
       std::to_string(p.actions) + (p.evaluation ? " of the evaluation program" : "");
  for (const detail::named_program& n : detail::g_programs)
    if (n.id != 0 && n.id == p.program && p.action >= 0 && p.action < p.actions) {
      try {
        s += " (" + n.name(p.stage, p.action, p.evaluation) + ")";
      } catch (...) {  // only words are lost
      }
      break;
    }
  return s;
}

}  // namespace strata
