#pragma once
// A schedule is a tag type S, named in Schedule<S>; the planner reads everything it needs
// off the tag, the same way for the built-in schedules (plan/schedules/) and a user's.
// A tag needs only its builder
//   template <int Stages, int M, int Chunks> static constexpr auto build();  // a sched::program
// and, to be told apart in reports, a name; every other member has a default:
//   name            reports and traces ("custom")
//   label           a short name for tables (the name)
//   chunks          pipeline parts per stage (1)
//   v_shape         the V placement of two chunks, sched::placed_part (false)
//   split_backward  backwards split into B and W (false). A plan reads its program's flag;
//                   this one is what AutoStages' probe and the search assume of the tag
//   check(parts, stages, micro-batches)  the schedule's structural rule, a
//                   detail::diagnosis (with chunks > 1: the interleaved schedule's rules)
// The cost model (plan/cost.hpp) prices a tag that also has
//   in_flight(p, m, s)            micro-batches each part of stage s keeps in flight (a bound)
//   bubble(p, stage_s, weight_s)  the step's idle time, from the slowest stage's time per
//                                 micro-batch and the part of it its W passes take
// and, with several chunks, may give
//   in_flight_part(p, m, s, chunk)  what chunk `chunk`'s part of stage s keeps (a bound;
//                                   in_flight for every part otherwise)
#include <concepts>
#include <string_view>

#include "strata/core/diagnosis.hpp"

namespace strata::sched {

// [interleave-parts] and [interleave-micro-batches]: V chunks per stage need a multiple of
// V parts, and micro-batches that advance through the chunks in groups of `stages`.
constexpr strata::detail::diagnosis interleave_check(int parts, int stages, int micro_batches, int chunks) {
  using enum strata::detail::rule_id;
  if (chunks <= 1) return {};
  if (parts % chunks != 0) return {interleave_parts, parts, chunks};
  if (micro_batches % stages != 0) return {interleave_micro_batches, micro_batches, stages};
  return {};
}

// [zero-bubble]: a split backward keeps each micro-batch's stash until its W, so nothing
// may overwrite or move it before then: no recomputed region, ZeRO 0 or 1, weights that
// are not staged.
constexpr bool split_backward_allows(int recomputed_regions, int zero, bool staged_weights) {
  return recomputed_regions == 0 && zero <= 1 && !staged_weights;
}

template <class S>
struct schedule_traits {
  static constexpr std::string_view name = [] {
    if constexpr (requires { std::string_view{S::name}; }) return std::string_view{S::name};
    else return std::string_view{"custom"};
  }();
  static constexpr std::string_view label = [] {
    if constexpr (requires { std::string_view{S::label}; }) return std::string_view{S::label};
    else return name;
  }();
  static constexpr int chunks = [] {
    if constexpr (requires { { S::chunks } -> std::convertible_to<int>; }) return static_cast<int>(S::chunks);
    else return 1;
  }();
  static constexpr bool v_shape = [] {
    if constexpr (requires { { S::v_shape } -> std::convertible_to<bool>; }) return static_cast<bool>(S::v_shape);
    else return false;
  }();
  static constexpr bool split_backward = [] {
    if constexpr (requires { { S::split_backward } -> std::convertible_to<bool>; })
      return static_cast<bool>(S::split_backward);
    else return false;
  }();

  template <int Stages, int M>
  static constexpr auto build() {
    return S::template build<Stages, M, chunks>();
  }

  static constexpr strata::detail::diagnosis check(int parts, int stages, int micro_batches) {
    if constexpr (requires(int n) { { S::check(n, n, n) } -> std::same_as<strata::detail::diagnosis>; })
      return S::check(parts, stages, micro_batches);
    else return interleave_check(parts, stages, micro_batches, chunks);
  }
};

}  // namespace strata::sched
