#pragma once
// What the lowering produces, as plain constexpr tables: buffers of the static buffer
// plan, the actions a device runs, each layer call with its buffers and per-device
// origins, layout conversions, each pipeline part's step lists, the parameter layout and
// the gradient buckets. plan/lower.hpp fills them; exec/ interprets them.
#include <array>
#include <cstddef>
#include <string_view>

#include "strata/core/sbp.hpp"
#include "strata/plan/program.hpp"
#include "strata/plan/sharding.hpp"

namespace strata::lower {

// Where a buffer lives. act/exit/gout/gin repeat once per slot of their part (see
// sched::assign_slots); work is one region per stage, reused by every layer call.
enum class pool : unsigned char { none, act, exit, gout, gin, work };

// Element kind of a buffer: the compute type T, the statistics type stat_t<T>, or int32.
enum class kind : unsigned char { values, stats, ids };

struct buf {
  pool where = pool::none;
  kind of = kind::values;
  int part = -1;        // the part whose slot holds it (per-slot pools)
  long long off = 0;    // elements from the start of the slot's (or the work region's) sub-arena of `of`
  long long elems = 0;
  constexpr bool empty() const { return where == pool::none; }
  friend constexpr bool operator==(const buf&, const buf&) = default;
};

// Every action a device runs. A part's step lists hold them as templates (kind and
// index); the device program (plan/lower/device_program.hpp) instantiates them per
// micro-batch with slots and adds what depends on the whole step: staging, gathers,
// gradient slots, reductions and the update.
enum class act : unsigned char {
  // one micro-batch of a part
  load,              // the model's input rows into the part's entry           (index: part)
  convert,           // a layout conversion                                   (index: conversion)
  copy,              // a view's output or input gradient at a part's edge, or dy kept for W (index: copy)
  prepare_loss,      // the loss layer's labels and books                     (index: layer)
  forward,           // a layer's forward                                     (index: layer)
  recompute,         // a layer's forward again, inside a backward            (index: layer)
  backward,          // a layer's backward, whole                             (index: layer)
  backward_data,     // zero-bubble B: the input's gradient                   (index: layer)
  backward_weights,  // zero-bubble W: the weight gradients                   (index: layer)
  // pipeline messages (one schedule instruction each)
  send_act, recv_act, send_grad, recv_grad,
  // weights read from a staging slot (Offload, CastWeightsPerUse, Zero<3>)
  fill_weights,      // a TaskGraph's masters into a slot, on the copy queue  (index: TaskGraph)
  wait_weights,      // the compute queue waits for the slot's fill
  gather_weights,    // Zero<3>: a TaskGraph all-gathered into a slot (unshard) (index: TaskGraph)
  release_weights,   // the slot's TaskGraph is read no more (reshard): it may be refilled
  // gradients
  open_grads,        // Zero<2/3>: a TaskGraph's backward writes a zeroed gradient slot (index: TaskGraph)
  reduce_bucket,     // a gradient bucket all-reduced, or its chunks reduce-scattered and tail all-reduced (index: bucket)
  shard_bucket,      // Zero<2/3>: this device's reduced chunk and tail added into its gradient shard (index: bucket)
  finish_reductions, // later work waits for every reduction
  tie_grads,         // a tied tensor's copies: their reduced gradients summed into each (index: layer of the copy)
  // a layer's kept statistics (running batch-norm statistics), at the step's end
  reduce_state,      // the step's sums all-reduced over the data-parallel replicas   (index: layer)
  fold_state,        // the layer folds them into the statistics it keeps              (index: layer)
  // the update, after the loss is known
  apply_group,       // the optimizer update of one ApplyGroups group          (index: group)
  gather_bucket,     // Zero<1/2>: the updated chunks of a bucket all-gathered into the masters (index: bucket)
  refresh_weights    // compute-type copies of the masters made again (mixed precision)
};

constexpr std::string_view to_string(act a) {
  switch (a) {
    case act::load: return "load";
    case act::convert: return "convert";
    case act::copy: return "copy";
    case act::prepare_loss: return "prepare-loss";
    case act::forward: return "forward";
    case act::recompute: return "recompute";
    case act::backward: return "backward";
    case act::backward_data: return "backward-data";
    case act::backward_weights: return "backward-weights";
    case act::send_act: return "send-act";
    case act::recv_act: return "recv-act";
    case act::send_grad: return "send-grad";
    case act::recv_grad: return "recv-grad";
    case act::fill_weights: return "fill-weights";
    case act::wait_weights: return "wait-weights";
    case act::gather_weights: return "gather-weights";
    case act::release_weights: return "release-weights";
    case act::open_grads: return "open-grads";
    case act::reduce_bucket: return "reduce-bucket";
    case act::shard_bucket: return "shard-bucket";
    case act::finish_reductions: return "finish-reductions";
    case act::tie_grads: return "tie-grads";
    case act::reduce_state: return "reduce-state";
    case act::fold_state: return "fold-state";
    case act::apply_group: return "apply-group";
    case act::gather_bucket: return "gather-bucket";
    case act::refresh_weights: return "refresh-weights";
  }
  return "?";
}
constexpr bool is_layer_call(act a) {
  return a == act::forward || a == act::recompute || a == act::backward || a == act::backward_data ||
         a == act::backward_weights;
}

// Which slot of each pool an action uses (see sched::assign_slots): its own part's act
// and gout slots, and the slot its output goes to (exit, gin, or with one stage the
// neighbouring part's act or gout). A message uses one slot for all three.
struct slot_set {
  int act = 0, gout = 0, out = 0;
};

struct action {
  act kind = act::forward;
  int index = -1;     // what the kind names: layer, conversion, copy, bucket, TaskGraph, group, part
  int part = -1;      // the pipeline part of a compute or message action
  int mb = 0;         // the micro-batch (evaluation: the executor's, per run of the program)
  slot_set slots{};
  int wslot = -1;     // the staging slot a layer call reads its weights from, or a staging action's slot
  int gslot = -1;     // Zero<2/3>: the gradient slot a layer call, an opening or a bucket uses
  int peer = -1;      // a message's pipeline stage on the other side
  bool group_next = false;  // a message posted together with the next one
  bool overlap = false;     // last message of a group the W's after it overlap
  bool every_pass = true;   // false: only in the last pass of a run-time gradient accumulation
  bool chunks = false;      // reduce/gather a bucket as ZeRO's chunks and tail
  bool half = false;        // reduce a bucket in fp16 (HalfGradientReduce)
};

// This device's place in a layer call's tensors: where its rows start in the
// micro-batch's rows (a row split, or a mesh block's row), where its features start, and
// where its inputs start in the micro-batch's model input (an Embedding reading ids).
struct call_origin {
  long long row0 = 0, col0 = 0;
  long long batch_first = 0;  // in elements of the model's input, from the micro-batch's first
  bool counts = true;         // a loss: this device books its rows (one device per row)
  // Where the local rows lie in their samples: local row r is sample (sample_row0 + r) / R
  // of the micro-batch at position pos0 + (sample_row0 + r) % R, R the local rows per sample
  // (layer_call::sample_rows). Without Context<N>, sample_row0 = row0 and pos0 = 0; with it,
  // the device holds positions [pos0, pos0 + R) of every sample: sample_row0 = 0. Under
  // ContextAllGather and ContextRing the rows are two pieces of R/2 rows ([piece][sample][R/2], core/sbp.hpp's
  // context_segments): pieces from pos0 and from pos1. (The first layer reading [Seq] token
  // ids has one row of Seq/N columns per sample instead.)
  long long sample_row0 = 0, pos0 = 0, pos1 = 0;
  // The device's place among the devices its layouts are cut over (the part's; Context<N,
  // Split<T>>: its tensor group's), and its context index (Context<N>: which pieces it holds).
  int index = 0, context_index = 0;
};

// One layer's call, as the executor makes it.
struct layer_call {
  local_dims dims{};
  long long sample_rows = 1;  // local rows per sample: the input's rows, / N under Context<N>
  buffer_needs needs{};
  buf x, y;                                  // forward: input (its layout), output
  buf stash_values, stash_stats, stash_ids;  // kept from forward for backward (act pool)
  buf scratch_values, scratch_stats;         // inside one call (work)
  buf backward_values;                       // from its backward to an earlier layer's (work: a skip slot)
  buf dy, dx;                                // backward: output and input gradients (dx empty: not computed)
  buf dy_keep, keep;                         // split backward: dy kept for W (dy itself when it is per-slot),
                                             // and what B leaves W (act pool)
  buf skip, skip_grad;                       // residuals: the skip (ResidualEnd reads it) and its
                                             // gradient (ResidualEnd's backward_values, ResidualBegin reads it)
  int num_params = 0;
  int taskgraph = 0;
  long long state_off = -1;  // its kept statistics and their sums in the stage's state (−1: none)
  bool reads_ids = false;  // the model's token ids (an Embedding first)
  bool loss = false;       // computes the loss: prepare_loss comes first
  bool aux_loss = false;   // adds an auxiliary loss to the step's (MoE)
  // SequenceParallel: it keeps its input, which arrives as a row split and is all-gathered
  // for it. Outside a recomputed region it keeps the row split (arrived_elems) and gathers
  // it again before its backward (Megatron-LM's sequence parallelism; Korthikanti et al.
  // 2022), into the stage's gathered buffer, instead of keeping the whole gathered input.
  bool regather = false;
  long long arrived_elems = 0;
  // the groups of the layer's own collectives, in the order the sharding pass lists them
  std::array<group_axis, 3> groups{};
  int num_groups = 0;
  group_axis own = group_axis::part;  // the group its layouts are cut over (exec/context.hpp's `part`)
};

// Whether layer i gathers its kept row split again (layer_call::regather) under the plan's
// recomputation regions: not inside a region (a region keeps only its input), nor after a
// view that ends one (its input, the row split, lives in the region's recompute buffers,
// which later work overwrites before this layer's backward). The lowering, the memory
// estimate and the cost model all ask this.
constexpr bool regathers_at(const layer_call* calls, const int* regions, int i) {
  return calls[i].regather && regions[i] < 0 && !(i > 0 && calls[i - 1].needs.view && regions[i - 1] >= 0);
}

// One layout conversion of a whole tensor of rows × cols (before any split).
struct conversion {
  int layer = -1;
  pass when = pass::forward;
  sbp from = sbp::broadcast, to = sbp::broadcast;
  collective coll = collective::none;
  long long rows = 0, cols = 0;
  buf src, dst, staging;  // src == dst: in place (an all-reduce)
  long long comm_elems = 0;  // the collective's size, by comm_desc's rule
  bool regather = false;     // a kept row split gathered again for the layer's backward (and W)
  group_axis group = group_axis::part;  // over the part, or Context<N, Split<T>>'s tensor group
};

// A copy between two buffers of one call (a view at a part's edge, dy kept for W).
struct copy_op {
  buf src, dst;
  long long elems = 0;
  int stage = 0;
};

// A step of a part's lists: an action kind and its index (a template of an action).
struct step {
  act kind = act::forward;
  int index = 0;
};

struct part_plan {
  int first = -1, last = -1, stage = 0;
  // ranges of `steps`: the forward, the backward (B when split) and the W list
  int fwd_begin = 0, fwd_end = 0, bwd_begin = 0, bwd_end = 0, wgt_begin = 0, wgt_end = 0;
  buf entry;  // the input as it arrives (act); empty when the first layer reads token ids
  buf exit;   // the output handed on: the exit pool, or the next part's entry (one stage)
  buf gout;   // the output's gradient (gout pool); empty for the part that ends with the loss
  buf gin;    // the input's gradient handed back: the gin pool, or the previous part's gout
  // one slot of each per-slot pool, in elements
  long long act_values = 0, act_stats = 0, act_ids = 0, exit_values = 0, gout_values = 0, gin_values = 0;
};

// A parameter tensor's place in its stage's flat parameter/gradient arrays: group 0 is
// reduced over the data-parallel group, group 1 over the part's devices and the data group.
// `axis` is the devices its gradient is reduced over: group 1 is always part_data; group
// 0 holds data, and under 2D/2.5D/3D also depth_data, col_data and plane_data tensors, laid
// out axis by axis so that no bucket mixes two axes.
struct tensor_place {
  int group = 0;
  long long offset = 0, size = 0;
  group_axis axis = group_axis::data;
};

struct bucket {
  int group = 0;
  group_axis axis = group_axis::data;
  long long offset = 0, count = 0;
  int layer = -1;      // reduced after this layer's final backward (every backward under Zero<2/3>)
  int taskgraph = -1;  // Zero<2/3>: the one TaskGraph whose tensors it holds
};

// Work-region layout (per stage): two activation/gradient buffers used in turn, the
// conversion staging, the layers' scratch, and the activations of one recomputed region
// (every region of the stage reuses it: a region's forward is run again right before
// its backward, and nothing else runs in between).
struct work_layout {
  long long ping = 0, staging = 0, scratch_values = 0, scratch_stats = 0;
  long long recompute_values = 0, recompute_stats = 0, recompute_ids = 0;
  // skip slots: slot d holds the skip's gradient of the residual at nesting depth d while
  // its backward runs, each slot the largest's size
  long long skip_slot = 0, skip_slots = 0;
  // the largest input gathered for a layer that keeps its row split (layer_call::regather)
  long long gathered = 0;
  long long state = 0;  // statistics layers keep across steps, with their sums (persistent, not work)
  constexpr long long values() const {
    return 2 * ping + staging + scratch_values + recompute_values + skip_slot * skip_slots + gathered;
  }
  constexpr long long stats() const { return scratch_stats + recompute_stats; }
  constexpr long long ids() const { return recompute_ids; }
};

// How a stage keeps its parameters, gradients and optimizer state (the buffer plan of
// exec/store.hpp), from the plan's ZeRO level, offload and precision options.
struct param_layout {
  bool partitioned = false;      // the update and its state split over each group's reduction devices (ZeRO ≥ 1)
  bool grads_sharded = false;    // gradients kept as this device's chunks, written through slots (ZeRO ≥ 2)
  bool masters_sharded = false;  // masters kept as this device's chunks (ZeRO 3)
  bool masters_on_host = false;  // Offload<...>
  bool state_on_host = false;    // Offload<weights_and_state>
  bool staged = false;           // layers read their TaskGraph's weights from one of two staging slots
  int apply_groups = 1;
  int half_scale = 0;            // HalfGradientReduce<S>: S, or 0
};

namespace detail {
constexpr long long layout_rows(long long full_rows, sbp l, int n, const strata::detail::mesh_factors& m) {
  return l == sbp::split_batch ? full_rows / n : l == sbp::block ? full_rows / m.rows : full_rows;
}
constexpr long long layout_cols(long long cols, sbp l, int n, const strata::detail::mesh_factors& m) {
  return l == sbp::split_feature ? cols / n : l == sbp::block ? cols / m.features : cols;
}
constexpr long long max2(long long a, long long b) { return a > b ? a : b; }
constexpr std::size_t idx(int i) { return static_cast<std::size_t>(i); }
}  // namespace detail

}  // namespace strata::lower
