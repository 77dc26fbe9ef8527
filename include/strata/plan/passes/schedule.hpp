#pragma once
// Pass 5, schedule: the schedule tag's program for every stage, its buffer slots
// (sched::assign_slots), and the proofs — complete, deadlock-free, and the zero-bubble
// conditions. The last pass: the lowering (plan/lower.hpp) is built from it.
#include "strata/plan/passes/shard.hpp"
#include "strata/plan/schedule.hpp"

namespace strata::detail {

template <class S>
struct schedule_pass : S {
  using S::stages, S::num_parts, S::num_micro_batch, S::recompute_regions, S::zero, S::staged_weights,
      S::structure_diag, S::model_diag, S::shard_diag;
  using typename S::schedule_info;
  // What the lowering and the analyses are built from: this chain of passes, so that a
  // Plan and its passes share one lowering.
  using passes = schedule_pass;

  static constexpr auto program = schedule_info::template build<stages, num_micro_batch>();
  // The schedule lowered with its buffer slots (sched::assign_slots): the action list the
  // executor runs, and the one the checks below prove.
  static constexpr auto lowered_program = sched::assign_slots<num_parts, num_micro_batch>(program);
  // Zero-bubble programs run each backward as B (input gradient) and, later, W (weights).
  static constexpr bool split_backward = program.split_backward;
  static constexpr sched::sim_result completeness = sched::check_complete(lowered_program.prog);
  static constexpr sched::sim_result simulation = sched::simulate(lowered_program.prog);

  static constexpr diagnosis schedule_diag = [] {
    if (split_backward && !sched::split_backward_allows(recompute_regions, zero, staged_weights))
      return diagnosis{rule_id::zero_bubble, recompute_regions, zero, staged_weights ? 1 : 0};
    if (completeness.status != sched::verdict::ok)
      return diagnosis{rule_id::schedule_complete, completeness.stage, completeness.instruction};
    if (simulation.status != sched::verdict::ok)
      return diagnosis{rule_id::deadlock, simulation.stage, simulation.instruction};
    return diagnosis{};
  }();
  static constexpr bool earlier_ok = structure_diag.ok() && model_diag.ok() && shard_diag.ok();
  static_assert(sizeof(raised<earlier_ok ? schedule_diag.id : rule_id::ok, schedule_diag.a, schedule_diag.b,
                              schedule_diag.c, schedule_diag.d>) != 0);

  static constexpr bool deadlock_free = simulation.status == sched::verdict::ok;
  static constexpr bool valid = structure_diag.ok() && model_diag.ok() && shard_diag.ok() && schedule_diag.ok();

  // The schedule's bubble with unit costs, and the micro-batches a stage holds at once.
  static constexpr sched::fraction bubble = sched::bubble_of(program, sched::unit_costs(program));
  static constexpr double bubble_fraction = bubble.value();
  static constexpr int peak_in_flight(int stage) { return sched::peak_in_flight(program, stage); }
};

// The chain of passes of Plan<Net, Options...>.
template <class Net, class... Options>
using plan_passes = schedule_pass<shard_pass<shapes_pass<placement_pass<structure_pass<Net, Options...>>>>>;

}  // namespace strata::detail
