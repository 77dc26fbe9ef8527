#pragma once
// Plan<Net, Options...>: the whole parallel training plan, computed and checked at
// compile time by a chain of passes, each a header of plan/passes/:
//   structure  options, items, layers, TaskGraphs, parts, stages; structural rules
//   placement  rank layout, tensor mesh, communication groups
//   shapes     per-sample shapes; the shape, loss and residual rules
//   shard      layouts, local shapes, collectives, recomputation; the sharding rules
//   schedule   the program per stage with its slots; completeness and deadlock proofs
// then lowered once (plan/lower.hpp) into every device's actions and buffer plan. Plan is
// the front that names them, plus the analyses — memory, communication, FLOPs — which
// are functions over the lowering (plan/memory.hpp, plan/communication.hpp, plan/flops.hpp).
#include "strata/plan/communication.hpp"
#include "strata/plan/flops.hpp"
#include "strata/plan/lower.hpp"
#include "strata/plan/memory.hpp"
#include "strata/plan/passes/schedule.hpp"

namespace strata {

template <class Net, class... Options>
struct Plan : detail::plan_passes<Net, Options...> {
  using passes = detail::plan_passes<Net, Options...>;
  using lowering = lower::lowered<passes>;
  using passes::default_dp, passes::element_bytes, passes::stat_bytes, passes::master_bytes;

  // ---- memory of parameters, gradients and optimizer state (plan/memory.hpp) ----------
  // `dp`: the data-parallel degree (0: unknown, counted as 1), which ZeRO divides by.
  // The largest TaskGraph's parameter elements on a device of `stage`: a staging slot.
  static constexpr long long staging_elems(int stage) { return detail::staging_elems<passes>(stage); }
  static constexpr long long parameter_bytes(int stage, int dp = default_dp) {
    return detail::parameter_bytes<passes>(stage, dp);
  }
  static constexpr long long host_bytes(int stage, int dp = default_dp) { return detail::host_bytes<passes>(stage, dp); }
  static constexpr long long update_buffer_bytes(int stage, int dp = default_dp) {
    return detail::update_buffer_bytes<passes>(stage, dp);
  }
  static constexpr long long gradient_bytes(int stage, int dp = default_dp) {
    return detail::gradient_bytes<passes>(stage, dp);
  }
  static constexpr long long optimizer_state_elems(int stage, int dp = default_dp) {
    return detail::optimizer_state_elems<passes>(stage, dp);
  }
  static constexpr long long adam_state_bytes(int stage, int dp = default_dp) {
    return detail::adam_state_bytes<passes>(stage, dp);
  }
  // ---- memory: read off the lowered buffer plan (plan/lower.hpp) -----------------------
  // Note the index each function takes: a pipeline *part* (Pipeline<...>'s k-th
  // argument) or a physical *stage* (with Interleaved<V>, stage s runs parts s,
  // s + stages, ...).
  // Activation bytes one micro-batch keeps on a device of `part` from its forward to its
  // backward: the part's input, the inputs its layers keep, their stashed statistics and ids.
  static constexpr long long stash_bytes(int part) { return lowering::stash_bytes(part, element_bytes, stat_bytes); }
  // Largest stash a device of `stage` holds: each part's stash times the micro-batches
  // its program keeps in flight at once.
  static constexpr long long peak_activation_bytes(int stage) {
    return lowering::peak_stash_bytes(stage, element_bytes, stat_bytes);
  }
  // Every activation buffer a device of `stage` allocates: the stash slots, messages
  // waiting to be sent or consumed, and the work region (transients, conversion
  // staging, scratch) — exactly what the executor allocates.
  static constexpr long long activation_arena_bytes(int stage) {
    return lowering::arena_bytes(stage, element_bytes, stat_bytes);
  }
  // Statistics layers keep across steps on a device of `stage` (BatchNorm2d's running mean
  // and variance) with the step's sums of them: the executor's layer state (exec/layer_state.hpp).
  static constexpr long long layer_state_bytes(int stage) {
    return lowering::tables.work[static_cast<std::size_t>(stage)].state * stat_bytes;
  }
  static constexpr long long peak_memory_bytes(int stage, int dp = default_dp) {
    return parameter_bytes(stage, dp) + gradient_bytes(stage, dp) + adam_state_bytes(stage, dp) +
           update_buffer_bytes(stage, dp) + activation_arena_bytes(stage) + layer_state_bytes(stage);
  }

  // ---- FLOPs (plan/flops.hpp) -------------------------------------------------------------
  // Model FLOPs of one replica per step (forward + backward, all devices of the replica).
  static constexpr long long flops_per_replica_step() { return detail::flops_per_replica_step<passes>(); }
  static constexpr long long flops_per_step(int world) {
    return flops_per_replica_step() * passes::data_parallel(world);
  }
  // FLOPs one device of `stage` executes per step.
  static constexpr long long device_flops_per_step(int stage) { return detail::device_flops_per_step<passes>(stage); }

  // ---- communication (plan/communication.hpp) --------------------------------------------
  // Every collective a device of `stage` takes part in per step, with its bytes (the
  // larger local buffer of each call, as comm_desc counts), read off the lowered
  // program: the layout conversions and layers' own collectives per micro-batch, the
  // pipeline messages this stage sends, and the gradient buckets. `dp` is the
  // data-parallel degree; a reduction over a group of one device is no traffic and is
  // not listed. With dp = 0 (unknown: the default unless the plan fixes World<N>)
  // data-group reductions are listed as for any dp > 1.
  using comm_table = detail::comm_table<passes>;
  static constexpr int max_comms = comm_table::max_rows;
  static constexpr comm_table communication(int stage, int dp = default_dp) {
    return communication_of(stage, dp, element_bytes, stat_bytes, master_bytes);
  }
  // The same for a trainer whose compute type is not the plan's Element<T>: the bytes of
  // its activations (t_bytes), statistics and masters.
  static constexpr comm_table communication_of(int stage, int dp, long long t_bytes, long long s_bytes,
                                               long long m_bytes) {
    return detail::communication_table<passes>(stage, dp, t_bytes, s_bytes, m_bytes);
  }
  static constexpr long long communication_bytes(int stage, int dp = default_dp) {
    const comm_table t = communication(stage, dp);
    long long b = 0;
    for (int i = 0; i < t.size; ++i) b += t.rows[static_cast<std::size_t>(i)].bytes;
    return b;
  }
  // The step's loss books (Σ loss, correct rows, rows: 3 doubles) are all-reduced over
  // the world once per step, beside the traffic above.
  static constexpr long long loss_books_bytes = 3 * 8;
};

}  // namespace strata
