#pragma once
// The sharding vocabulary shared by layers and the planner: layouts (OneFlow's SBP),
// collectives, communication groups, signatures and passes.
#include <array>
#include <string_view>

#include "strata/core/diagnosis.hpp"
#include "strata/core/shape.hpp"

namespace strata {

// Layout of an activation over the devices of one pipeline part.
enum class sbp : unsigned char {
  broadcast,      // B: every device holds the whole tensor
  split_batch,    // S(0): rows (samples/tokens) divided among devices
  split_feature,  // S(-1): the last axis divided among devices
  partial,        // P: every device holds a partial sum of the whole tensor
  block           // 2D/2.5D/3D: rows and features divided over the tensor mesh
};

enum class collective : unsigned char {
  none,
  all_reduce,
  all_gather,
  reduce_scatter,
  all_to_all,
  broadcast,
  send_recv
};

// Which ranks take part, relative to the caller.
enum class group_axis : unsigned char {
  part,        // the devices of this pipeline part (size n)
  data,        // same position in every data-parallel replica
  pipeline,    // neighbouring pipeline stage
  part_data,   // part × data: replicated parameters that saw different samples
  mesh_row,    // 2D/2.5D/3D sub-axes of the tensor mesh
  mesh_col,
  mesh_depth,
  depth_data,  // 2.5D: weights replicated over depth layers and replicas
  col_data,    // 2D/2.5D/3D biases: one mesh column (all rows and depths) × replicas
  plane_data,  // 3D biases whose features lie along the depth: one depth plane × replicas
  tensor,       // Context<N, Split<T>>: the T devices of one context index (the layers' own collectives)
  context,      // Context<N>: the N devices of one tensor index (attention's exchange)
  context_data  // Context<N, Split<T>>: one tensor index's devices × replicas (its shards' gradients)
};
inline constexpr int num_group_axes = static_cast<int>(group_axis::context_data) + 1;

enum class signature : unsigned char {
  replicated,       // whole tensors, whole parameters (one device, or redundant compute)
  data_parallel,    // Replicate<N>, N > 1: rows split, parameters replicated
  pointwise,        // layout passes through
  column_parallel,  // Megatron: W split by output features, input broadcast
  row_parallel,     // Megatron: W split by input features, output partial
  vocab_embedding,  // table split by vocabulary, output partial
  head_parallel,    // attention heads split; out-projection row-parallel
  column_row,       // a column-parallel then a row-parallel product in one layer (SwiGLU)
  expert_parallel,  // experts split, tokens exchanged by all-to-all
  vocab_loss,       // cross-entropy over vocabulary-split logits
  summa_2d,         // Colossal-AI 2D (SUMMA)
  tesseract_2p5d,   // Colossal-AI 2.5D
  cube_3d           // Colossal-AI 3D
};

enum class pass : unsigned char { forward, backward };

constexpr std::string_view to_string(sbp s) {
  switch (s) {
    case sbp::broadcast: return "B";
    case sbp::split_batch: return "S(0)";
    case sbp::split_feature: return "S(-1)";
    case sbp::partial: return "P";
    case sbp::block: return "S(0,-1)";
  }
  return "?";
}
constexpr std::string_view to_string(collective c) {
  switch (c) {
    case collective::none: return "none";
    case collective::all_reduce: return "all-reduce";
    case collective::all_gather: return "all-gather";
    case collective::reduce_scatter: return "reduce-scatter";
    case collective::all_to_all: return "all-to-all";
    case collective::broadcast: return "broadcast";
    case collective::send_recv: return "send/recv";
  }
  return "?";
}
constexpr std::string_view to_string(group_axis g) {
  switch (g) {
    case group_axis::part: return "part";
    case group_axis::data: return "data";
    case group_axis::pipeline: return "pipeline";
    case group_axis::part_data: return "part×data";
    case group_axis::mesh_row: return "mesh-row";
    case group_axis::mesh_col: return "mesh-col";
    case group_axis::mesh_depth: return "mesh-depth";
    case group_axis::depth_data: return "depth×data";
    case group_axis::col_data: return "col×data";
    case group_axis::plane_data: return "plane×data";
    case group_axis::tensor: return "tensor";
    case group_axis::context: return "context";
    case group_axis::context_data: return "context×data";
  }
  return "?";
}
constexpr std::string_view to_string(signature s) {
  switch (s) {
    case signature::replicated: return "replicated";
    case signature::data_parallel: return "data-parallel";
    case signature::pointwise: return "pointwise";
    case signature::column_parallel: return "column-parallel";
    case signature::row_parallel: return "row-parallel";
    case signature::vocab_embedding: return "vocab-parallel-embedding";
    case signature::head_parallel: return "head-parallel";
    case signature::column_row: return "column-then-row-parallel";
    case signature::expert_parallel: return "expert-parallel";
    case signature::vocab_loss: return "vocab-parallel-loss";
    case signature::summa_2d: return "2d-summa";
    case signature::tesseract_2p5d: return "2.5d-tesseract";
    case signature::cube_3d: return "3d-cube";
  }
  return "?";
}

// One collective per micro-batch. `elems` is the larger of the two local buffers a
// device passes: the whole tensor for all-reduce, the send buffer for reduce-scatter
// and all-to-all, the receive buffer for all-gather, the message for send/recv.
// `calls` is how many times per micro-batch. The counting communicator
// (comm/counting.hpp) measures bytes by the same rule.
struct comm_desc {
  collective kind = collective::none;
  group_axis group = group_axis::part;
  pass when = pass::forward;
  long long elems = 0;
  int calls = 1;
  int layer = -1;
  bool stats = false;  // elements of the statistics type (stat_t<T>), not of T
};

// How attention exchanges under Context<N> (strategy/options.hpp's ContextAllGather,
// ContextAllToAll and ContextRing): every device gathers the whole sequence's keys and
// values, or the sequence and the heads trade places by all-to-all (DeepSpeed-Ulysses), or
// the key/value blocks travel around the part's ring (ring attention).
enum class context_mode : unsigned char { all_gather, all_to_all, ring };
constexpr std::string_view to_string(context_mode m) {
  switch (m) {
    case context_mode::all_gather: return "all-gather";
    case context_mode::all_to_all: return "all-to-all";
    case context_mode::ring: return "ring";
  }
  return "?";
}

// The pieces of a sequence each of Context<N>'s devices holds. All-gather and ring: two, device k
// pieces k and 2N − 1 − k of 2N (Megatron's and torchtitan's causal load balancing: under a
// causal mask every device then attends its queries to the same number of keys); local rows
// [piece][sample][Seq/2N]. All-to-all: one, positions [k·Seq/N, (k+1)·Seq/N) (the heads
// split attends whole sequences, balanced already).
constexpr int context_segments(int context, context_mode m) {
  return context > 1 && m != context_mode::all_to_all ? 2 : 1;
}
// The first position of piece h (< segments) of device k, pieces of `len` positions: k·len,
// or under two segments (2N − 1 − k)·len for the second.
constexpr long long context_piece_pos0(int context, int k, int h, long long len) {
  return static_cast<long long>(h == 0 ? k : 2 * context - 1 - k) * len;
}

// What one device holds of a layer's tensors for one micro-batch, as the planner's
// sharding decided (local rows of the input and output, local columns).

struct local_dims {
  long long rows = 0;      // local rows of the input (samples x leading dims, split if S(0))
  long long out_rows = 0;  // local rows of the output
  long long in_cols = 0, out_cols = 0;
  shape_t in{}, out{};     // per-sample logical shapes
  int n = 1;               // devices of the part
  signature sig = signature::replicated;
  int q = 0;               // 2D/2.5D/3D: the mesh side, features cut q ways (0: no mesh)
  int context = 1;         // Context<N>: the part's N devices each hold 1/N of every sample's rows
  context_mode exchange = context_mode::all_gather;  // Context<N>: attention's exchange
  // Context<N>: the pieces of every sample the local rows hold, [piece][sample] (two under
  // ContextAllGather and ContextRing; one under ContextAllToAll, and where SequenceParallel
  // cuts a Context<N, Split<T>> group's rows: each device then holds part of one piece)
  int pieces = 1;
};

// The memory a layer's execution needs, per device and micro-batch, in elements of
// the compute type (values), of the statistics type (stats) and of int32 (ids). The
// planner lays out every buffer from these numbers before anything runs.
struct buffer_needs {
  bool keep_input = false;  // forward's input must survive until backward (stashed)
  bool view = false;        // the output is the input, unchanged (reshapes: no kernel runs)
  bool backward_kernel = false;  // a view whose backward still runs (ResidualBegin adds the skip's gradient)
  long long stash_values = 0, stash_stats = 0, stash_ids = 0;  // kept from forward for backward
  long long scratch_values = 0, scratch_stats = 0;             // used inside one call only
  // Values this layer's backward leaves an earlier layer's backward of the same micro-batch
  // (a skip connection's gradient, ResidualEnd's for its ResidualBegin): they live while
  // that one backward runs, in the work region, not in every in-flight micro-batch's stash.
  long long backward_values = 0;
  // Zero-bubble schedules: the backward splits into backward_data (B: the input's gradient)
  // and backward_weights (W, later), which reads the input, the output's gradient and
  // weight_keep values B leaves it.
  bool weight_pass = false;
  long long weight_keep = 0;
  // Statistics the layer keeps across steps (BatchNorm2d's running mean and variance), saved in
  // checkpoints, and the sums a training step adds for them: all-reduced over the data-parallel
  // replicas at the step's end, then folded into the kept ones by the layer (fold_state).
  long long state_stats = 0, state_sums = 0;
};

inline constexpr int max_layer_params = 6;
inline constexpr int max_layer_comms = 12;  // a 2D/2.5D/3D attention: two projections of six

// What the sharding pass asks a layer at its place in a Split<n> TaskGraph (1D tensor
// parallelism): how it can run given the layout its input arrives in.
struct shard_query {
  sbp arrives = sbp::broadcast;
  int n = 1;                 // devices of the Split
  shape_t in{}, out{};       // per-sample shapes
  int split_extent = 0;      // heads, vocabulary or experts
  long long micro_batch = 1;
  bool next_is_loss = false; // a column-parallel layer feeding the loss is a vocabulary split
  bool sequence_parallel = false;  // SequenceParallel: row-wise layers take a partial sum as a row split
  context_mode exchange = context_mode::all_gather;  // Context<N>: attention's exchange
  int tensor = 1;  // context_shard under Context<N, Split<T>>: T (each device holds 1/T of the heads)
};

// A layer's answer: its signature, the layout it needs and produces, how it cuts its
// parameters, the collectives inside it, and the rule it breaks, if any.
struct shard_choice {
  signature sig = signature::replicated;
  sbp need = sbp::broadcast, out = sbp::broadcast;
  int rows_div = 1, feat_div = 1;  // share of the rows / features this device holds
  // Sharded weights reading a broadcast input make the input's gradient a partial sum
  // (Megatron's "f" operator): column-, head- and vocabulary-parallel layers.
  bool partial_input_grad = false;
  std::array<signed char, max_layer_params> param_axis{-1, -1, -1, -1, -1, -1};  // cut n ways; −1: whole
  int flops_div = 1;  // share of the layer's FLOPs one device executes
  std::array<comm_desc, 4> comms{};  // collectives inside the layer, per micro-batch
  int num_comms = 0;
  rule_id violated = rule_id::ok;
  int violated_value = 0;

  constexpr void add(collective c, group_axis g, pass p, long long elems, int calls = 1, bool stats = false) {
    if (num_comms < static_cast<int>(comms.size()))
      comms[static_cast<std::size_t>(num_comms++)] = {c, g, p, elems, calls, -1, stats};
  }
  constexpr void violate(rule_id r, int value) {
    if (violated == rule_id::ok) violated = r, violated_value = value;
  }
};

// What the sharding pass asks a layer in a Split<n> TaskGraph under 2D, 2.5D or 3D tensor
// parallelism (Colossal-AI): activations are S(0,-1) blocks, their features cut q ways.
struct mesh_query {
  signature linear = signature::summa_2d;  // the mode's Linear: summa_2d, tesseract_2p5d or cube_3d
  int q = 1;                               // the mesh side
  shape_t in{}, out{};                     // per-sample shapes
  int split_extent = 0;                    // heads, vocabulary or experts
};

// One projection the layer runs as the mode's Linear (layers/linear_mesh.hpp): in → out features.
struct mesh_projection {
  long long in = 0, out = 0;
};

// A layer's answer on the mesh: its signature, the projections it runs (their collectives
// are the planner's; under 3D each turns the layout), which projection each parameter
// belongs to (cut over the mesh: weights on both axes, biases on the output's feature
// blocks; −1: whole), whether it all-reduces row moments over the features' mesh axis
// (LayerNorm), and the rule it breaks. Not supported: rule [tensor-mode-layer].
struct mesh_choice {
  bool supported = true;
  signature sig = signature::replicated;
  std::array<mesh_projection, 2> projections{};
  int num_projections = 0;
  std::array<signed char, max_layer_params> param_projection{-1, -1, -1, -1, -1, -1};
  bool row_moments = false;
  rule_id violated = rule_id::ok;
  int violated_value = 0;

  constexpr void project(long long in, long long out) {
    if (num_projections < static_cast<int>(projections.size()))
      projections[static_cast<std::size_t>(num_projections++)] = {in, out};
  }
  constexpr void violate(rule_id r, int value) {
    if (violated == rule_id::ok) violated = r, violated_value = value;
  }
};

}  // namespace strata
