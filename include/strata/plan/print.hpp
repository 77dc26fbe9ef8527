#pragma once
// The lowered program in words, for the plan report and for error messages: one line
// per stage (its schedule in order) and per part (its forward, backward and W steps).
//   F3 s1        forward of micro-batch 3 (stash slot 1); F3.c1: of chunk 1 (interleaved)
//   B3 s1        backward of micro-batch 3
//   send-act mb3, recv-grad mb3, ...   pipeline messages; "+" joins a group posted together
//   reduce-grads, optimizer             the step's end
#include <string>
#include <string_view>

#include "strata/plan/lower.hpp"
#include "strata/plan/schedule.hpp"

namespace strata {

namespace detail {
inline std::string mb_text(const sched::instr& x, int chunks) {
  std::string s = std::to_string(x.mb);
  if (chunks > 1) s += ".c" + std::to_string(x.chunk);
  return s;
}
}  // namespace detail

// One action of a stage's program.
inline std::string action_text(const sched::instr& x, int chunks) {
  switch (x.kind) {
    case sched::op::forward:
    case sched::op::backward:
    case sched::op::weight:
      return std::string(sched::to_string(x.kind)) + detail::mb_text(x, chunks) +
             (x.slot >= 0 ? " s" + std::to_string(x.slot) : std::string());
    case sched::op::reduce_grads: return "reduce-grads";
    case sched::op::optimizer_step: return "optimizer";
    default: return std::string(sched::to_string(x.kind)) + " mb" + detail::mb_text(x, chunks);
  }
}

// A stage's whole action list.
template <class P>
std::string program_text(int stage) {
  const auto& prog = P::lowered_program.prog;
  std::string o;
  for (int i = 0; i < prog.length[static_cast<std::size_t>(stage)]; ++i) {
    const sched::instr& x = prog.at(stage, i);
    if (i > 0) o += i > 0 && prog.at(stage, i - 1).group_next ? " + " : " | ";
    o += action_text(x, P::chunks);
  }
  return o;
}

// One step of a part's step list.
template <class P>
std::string step_text(const lower::step& st) {
  using L = lower::lowered<P>;
  const std::string name(lower::to_string(st.kind));
  switch (st.kind) {
    case lower::act::load: return name;
    case lower::act::convert: {
      const lower::conversion& c = L::tables.convs[static_cast<std::size_t>(st.index)];
      return "convert " + std::string(to_string(c.from)) + "->" + std::string(to_string(c.to)) +
             (c.coll == collective::none ? std::string(" (slice)") : " (" + std::string(to_string(c.coll)) + ")");
    }
    case lower::act::reduce_bucket: return name + " " + std::to_string(st.index);
    case lower::act::copy: return name;
    default:
      return name + " L" + std::to_string(st.index) + " " +
             std::string(P::layer_plans[static_cast<std::size_t>(st.index)].desc.name);
  }
}

// A part's forward, backward (B when split) or W steps.
template <class P>
std::string part_text(int part, bool forward, bool weights = false) {
  using L = lower::lowered<P>;
  const lower::part_plan& pp = L::tables.parts[static_cast<std::size_t>(part)];
  std::string o;
  const int b = forward ? pp.fwd_begin : weights ? pp.wgt_begin : pp.bwd_begin;
  const int e = forward ? pp.fwd_end : weights ? pp.wgt_end : pp.bwd_end;
  for (int k = b; k < e; ++k) {
    if (k > b) o += " | ";
    o += step_text<P>(L::tables.steps[static_cast<std::size_t>(k)]);
  }
  return o;
}

}  // namespace strata
