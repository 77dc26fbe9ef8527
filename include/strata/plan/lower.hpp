#pragma once
// Lowering: a plan turned, once and at compile time, into exactly what runs.
//  * per stage, the verified schedule with each micro-batch's buffer slots and each
//    part's final backward marked (sched::assign_slots);
//  * per pipeline part, its step lists (plan/lower/parts.hpp): loading the input, layout
//    conversions, copies, the loss's preparation, layer calls forward and backward (and
//    the W half), the gradient buckets in place (plan/lower/buckets.hpp);
//  * the static buffer plan: every activation, stash, message, staging and scratch
//    buffer with its pool, offset and exact size, local rows included;
//  * the parameter layout (each tensor's group and offset, how the stage keeps its
//    parameters, gradients and optimizer state) and the gradient buckets;
//  * per device, the whole action list of a training step, of an evaluation and of the
//    update (plan/lower/device_program.hpp), checked (plan/lower/check.hpp).
// The executor interprets these and allocates exactly these; the plan's analyses
// (memory, communication) read them. Nothing is decided again at run time.
#include <array>
#include <cstddef>

#include "strata/plan/lower/buckets.hpp"
#include "strata/plan/lower/parts.hpp"
#include "strata/plan/lower/tables.hpp"
#include "strata/plan/schedule.hpp"

namespace strata::lower {

// Built from a plan's chain of passes (plan/passes/schedule.hpp), never from the Plan
// front, so that the Plan's analyses can read it; lowered<Plan> names the same type.
template <class P>
struct lowering {
  static constexpr int NL = P::num_layers, NP = P::num_parts, NS = P::stages, PD = P::part_devices;
  // Zero<2/3> cut buckets at TaskGraph boundaries too (a TaskGraph's gradients and
  // weights come and go together), plus one per extra reduction axis of the N-D modes
  // the copies of a tied tensor are cut out of their groups: up to four more
  static constexpr int max_buckets = 2 * (P::buckets + (P::zero >= 2 ? P::num_taskgraphs : 0)) + 3 + (P::tie.any() ? 4 : 0);
  static constexpr int max_steps = NP + 11 * NL + NS * max_buckets + 1;
  static constexpr std::size_t idx(int i) { return static_cast<std::size_t>(i); }

  // ---- the programs -----------------------------------------------------------------
  static constexpr auto train = P::lowered_program;
  static constexpr auto eval = sched::assign_slots<NP, 1>(sched::forward_only<NS, P::chunks, P::v_shape>());

  // ---- where this device stands (what the executor needs of the plan's placement) ----
  static constexpr int stages = NS, parts = NP, part_devices = PD, num_layers = NL;
  static constexpr int stage_of_part(int part) { return P::stage_of_part(part); }
  static constexpr int part_of(int stage, int chunk) { return P::part_of(stage, chunk); }
  static constexpr int rank_of(int data, int stage, int index) { return P::rank_of(data, stage, index); }
  static constexpr int chunks = P::chunks;
  static constexpr strata::detail::mesh_factors mesh = P::mesh;
  // the devices layouts are cut over, and device `index`'s place among them
  static constexpr int layout_devices = P::layout_devices;
  static constexpr int layout_index(int index) { return P::layout_index(index); }
  // the block of layer `layer`'s input device `index` holds (S(0,-1))
  static constexpr strata::detail::act_block input_block(int layer, int index) { return P::input_block(layer, index); }
  using layers = typename P::layers;
  // the loss is the mean over every replica's rows (GradientReduce<ReduceMean>), not their sum
  static constexpr bool mean_over_replicas = P::gradient_reduce == reduce_method::mean;
  // the batch: a micro-batch's model inputs and labels lie this far apart
  static constexpr long long input_elems = P::input_shape.numel();
  static constexpr long long labels_per_sample = P::labels_per_sample;
  static constexpr long long replica_batch = P::replica_batch;
  static constexpr long long micro_batch = P::micro_batch;
  static constexpr long long input_stride = P::micro_batch * input_elems;
  static constexpr long long label_stride = P::micro_batch * labels_per_sample;
  // Context<N>: when a batch lands the executor arranges each micro-batch device-major. Cut
  // into `pieces` pieces (2N under ContextAllGather and ContextRing, N under ContextAllToAll: core/sbp.hpp's
  // context_segments), sample b's piece j moves from place b·pieces + j to
  // (k·segments + h)·B + b, device k holding it as its piece h — pieces k and 2N − 1 − k
  // under all-gather and ring, piece k under all-to-all — so that device k's rows, [piece][sample], lie
  // together as a row split reads them. No moves without it.
  static constexpr int context = P::context;
  static constexpr int segments = context_segments(P::context, P::context_exchange);
  static constexpr int pieces = context * segments;
  static_assert(!P::valid || (input_elems % pieces == 0 && labels_per_sample % pieces == 0),
                "strata internal: Context<N> cuts every sample's inputs and labels into its pieces ([context-seq] checks it)");
  struct chunk_move {
    long long from = 0, to = 0;  // in pieces of a sample (input_elems / pieces elements of the input)
  };
  static constexpr std::size_t num_chunk_moves = context > 1 ? idx(int(P::micro_batch) * pieces) : 0;
  static constexpr std::array<chunk_move, num_chunk_moves> arrangement = [] {
    std::array<chunk_move, num_chunk_moves> a{};
    long long m = 0;
    for (auto& move : a) {  // (no index loop: nvcc calls `m < 0` pointless without Context)
      const long long b = m / pieces, j = m % pieces;
      const long long k = j < context ? j : 2 * context - 1 - j, h = j < context ? 0 : 1;
      move = {b * pieces + j, (k * segments + h) * P::micro_batch + b};
      ++m;
    }
    return a;
  }();

  // ---- layers, parts and buffers -----------------------------------------------------
  struct layer_tables {
    static constexpr int max_buckets = lowering::max_buckets;
    std::array<layer_call, idx(NL)> calls{};
    std::array<std::array<call_origin, idx(PD)>, idx(NL)> origins{};
    std::array<conversion, idx(3 * NL)> convs{};
    int num_convs = 0;
    std::array<copy_op, idx(4 * NL)> copies{};
    int num_copies = 0;
    std::array<step, idx(max_steps)> steps{};
    int num_steps = 0;
    std::array<part_plan, idx(NP)> parts{};
    std::array<long long, idx(PD)> load_first{};  // part 0's input: where this device's rows start
    std::array<work_layout, idx(NS)> work{};
    std::array<std::array<tensor_place, max_layer_params>, idx(NL)> params{};
    std::array<std::array<long long, 2>, idx(NS)> group_elems{};
    std::array<std::array<bucket, idx(max_buckets)>, idx(NS)> buckets{};
    std::array<int, idx(NS)> num_buckets{};
  };

  static constexpr layer_tables build() {
    layer_tables t{};
    detail::describe_calls<P>(t);
    detail::lay_out_parts<P>(t);
    const layer_plan& F = P::layer_plans[0];
    for (int d = 0; d < PD; ++d)
      t.load_first[idx(d)] = (F.arrives == sbp::split_batch ? d : P::context_block(d)) * t.parts[0].entry.elems;
    detail::lay_out_params<P>(t);
    std::array<int, idx(NP)> fb{};  // each part's final backward in its stage's program
    for (int q = 0; q < NP; ++q) fb[idx(q)] = final_backward(P::stage_of_part(q), q);
    detail::cut_buckets<P>(t, fb);
    detail::place_buckets<P>(t);
    return t;
  }

  static constexpr int final_backward(int s, int part) {
    int pos = -1;
    for (int i = 0; i < train.prog.length[idx(s)]; ++i) {
      const sched::instr& x = train.prog.at(s, i);
      // with split backwards the weight gradients are complete after the final W
      const sched::op last = train.prog.split_backward ? sched::op::weight : sched::op::backward;
      if (x.kind == last && P::part_of(s, x.chunk) == part) pos = i;
    }
    return pos;
  }

  static constexpr layer_tables tables = build();

  // How every stage keeps its parameters (exec/store.hpp allocates exactly this).
  static constexpr param_layout params = [] {
    param_layout l;
    l.partitioned = P::zero >= 1;
    l.grads_sharded = P::zero >= 2;
    l.masters_sharded = P::zero >= 3;
    l.masters_on_host = P::offload != offload_level::none;
    l.state_on_host = P::offload == offload_level::weights_and_state;
    l.staged = P::staged_weights;
    l.apply_groups = P::apply_groups;
    l.half_scale = P::half_reduce;
    return l;
  }();
  // Zero<2/3>'s gradient slots on a device of `stage`: two, so that one TaskGraph's
  // reductions overlap the next one's backward, or one when only one TaskGraph there has
  // parameters (nothing to overlap).
  static constexpr int gradient_slots(int stage) {
    if (!params.grads_sharded) return 0;
    int with_params = 0;
    for (int tg = 0; tg < P::num_taskgraphs; ++tg) with_params += taskgraph_elems(stage, tg) > 0;
    return with_params > 1 ? 2 : 1;
  }
  // Parameter elements of TaskGraph tg on a device of `stage` (a staging or gradient slot's share).
  static constexpr long long taskgraph_elems(int stage, int tg) {
    long long n = 0;
    for (int i = 0; i < NL; ++i)
      if (P::layer_plans[idx(i)].taskgraph == tg && P::stage_of_part(P::layer_plans[idx(i)].part) == stage)
        for (int k = 0; k < P::layer_plans[idx(i)].desc.num_params; ++k) n += tables.params[idx(i)][idx(k)].size;
    return n;
  }
  static constexpr long long largest_taskgraph(int stage) {
    long long most = 0;
    for (int tg = 0; tg < P::num_taskgraphs; ++tg) most = detail::max2(most, taskgraph_elems(stage, tg));
    return most;
  }
  // The largest bucket of a stage (the fp16 buffer of HalfGradientReduce).
  static constexpr long long largest_bucket(int stage) {
    long long most = 0;
    for (int b = 0; b < tables.num_buckets[idx(stage)]; ++b) most = detail::max2(most, tables.buckets[idx(stage)][idx(b)].count);
    return most;
  }

  // ---- sizes --------------------------------------------------------------------------
  static constexpr int slots(sched::pool_kind k, int part) { return train.count(k, part); }

  // Bytes of the activation buffers of one stage for compute type T and statistics S.
  static constexpr long long arena_bytes(int stage, long long t_bytes, long long s_bytes) {
    long long b = 0;
    for (int p = 0; p < NP; ++p) {
      const part_plan& pp = tables.parts[idx(p)];
      if (pp.stage != stage) continue;
      b += slots(sched::pool_kind::act, p) * (pp.act_values * t_bytes + pp.act_stats * s_bytes + pp.act_ids * 4);
      b += slots(sched::pool_kind::exit, p) * pp.exit_values * t_bytes;
      b += slots(sched::pool_kind::gout, p) * pp.gout_values * t_bytes;
      b += slots(sched::pool_kind::gin, p) * pp.gin_values * t_bytes;
    }
    const work_layout& w = tables.work[idx(stage)];
    return b + w.values() * t_bytes + w.stats() * s_bytes + w.ids() * 4;
  }
  // The stash: what one micro-batch keeps in its act slot, and the stage's peak.
  static constexpr long long stash_bytes(int part, long long t_bytes, long long s_bytes) {
    const part_plan& pp = tables.parts[idx(part)];
    return pp.act_values * t_bytes + pp.act_stats * s_bytes + pp.act_ids * 4;
  }
  static constexpr long long peak_stash_bytes(int stage, long long t_bytes, long long s_bytes) {
    long long b = 0;
    for (int p = 0; p < NP; ++p)
      if (tables.parts[idx(p)].stage == stage) b += slots(sched::pool_kind::act, p) * stash_bytes(p, t_bytes, s_bytes);
    return b;
  }
};

template <class P>
using lowered = lowering<typename P::passes>;

}  // namespace strata::lower
