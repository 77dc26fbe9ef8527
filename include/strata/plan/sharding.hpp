#pragma once
// Sharding: every activation edge gets a layout (OneFlow's SBP: split / broadcast /
// partial-sum) and every layer a signature; the collective that converts one layout
// into the next is derived here, forward and backward, never written by hand.
#include <array>
#include <string_view>

#include "strata/layers/layer.hpp"
#include "strata/strategy/options.hpp"

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
  col_data     // 2D/2.5D/3D biases: one mesh column (all rows and depths) × replicas
};

enum class signature : unsigned char {
  replicated,       // whole tensors, whole parameters (one device, or redundant compute)
  data_parallel,    // Replicate<N>, N > 1: rows split, parameters replicated
  pointwise,        // layout passes through
  column_parallel,  // Megatron: W split by output features, input broadcast
  row_parallel,     // Megatron: W split by input features, output partial
  vocab_embedding,  // table split by vocabulary, output partial
  head_parallel,    // attention heads split; out-projection row-parallel
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
    case signature::expert_parallel: return "expert-parallel";
    case signature::vocab_loss: return "vocab-parallel-loss";
    case signature::summa_2d: return "2d-summa";
    case signature::tesseract_2p5d: return "2.5d-tesseract";
    case signature::cube_3d: return "3d-cube";
  }
  return "?";
}

// One collective a layer issues per micro-batch. `elems` is the buffer each device
// passes (elements of the full local buffer); `calls` how many times per micro-batch.
struct comm_desc {
  collective kind = collective::none;
  group_axis group = group_axis::part;
  pass when = pass::forward;
  long long elems = 0;
  int calls = 1;
  int layer = -1;
};

// Where the sharding pass found a broken rule; the Plan turns it into a static_assert.
enum class shard_rule : unsigned char {
  ok,
  split_features,
  split_vocab,
  split_heads,
  split_experts,
  tensor_mode_layer,
  tensor_batch
};
struct shard_violation {
  shard_rule rule = shard_rule::ok;
  int layer = 0, value = 0, n = 1;
};

struct taskgraph_desc {
  strategy_kind kind = strategy_kind::replicate;
  int devices = 1;
  int part = 0;
  int first_layer = 0;
  int num_layers = 0;
  bool is_default = false;
};

inline constexpr int max_layer_params = 6;
inline constexpr int max_layer_comms = 8;

struct layer_plan {
  layer_desc desc{};
  int taskgraph = 0;
  int part = 0;
  shape_t in{}, out{};
  sbp in_layout = sbp::broadcast;   // required by the layer (after conversion)
  sbp arrives = sbp::broadcast;     // produced by what came before
  sbp out_layout = sbp::broadcast;
  signature sig = signature::replicated;
  std::array<comm_desc, max_layer_comms> comms{};
  int num_comms = 0;
  std::array<shape_t, max_layer_params> local_params{};
  std::array<group_axis, max_layer_params> grad_group{};
  long long local_param_elems = 0;
  int rows_div = 1;      // local rows = micro-batch rows / rows_div
  int features_div = 1;  // local activation share of the stashed elements
  long long local_stash_per_sample = 0;  // elements per sample of the micro-batch, this device
  long long local_flops_per_sample = 0;  // forward + backward
};

namespace detail {

constexpr sbp grad_of(sbp out) { return out == sbp::partial ? sbp::broadcast : out; }

// The collective that turns layout `from` into `to` over the part's devices
// (OneFlow's boxing table); B→S is a local slice and B→P free (one device keeps it).
constexpr collective convert(sbp from, sbp to) {
  if (from == to) return collective::none;
  switch (from) {
    case sbp::broadcast: return collective::none;
    case sbp::partial: return to == sbp::broadcast ? collective::all_reduce : collective::reduce_scatter;
    case sbp::split_batch:
      return to == sbp::split_feature ? collective::all_to_all
                                      : (to == sbp::partial ? collective::none : collective::all_gather);
    case sbp::split_feature:
      return to == sbp::split_batch ? collective::all_to_all
                                    : (to == sbp::partial ? collective::none : collective::all_gather);
    case sbp::block: return to == sbp::partial ? collective::none : collective::all_gather;
  }
  return collective::none;
}

// Signatures whose backward makes the gradient of a broadcast input a partial sum
// (each device only sees its shard of the weights): Megatron's "f" operator.
constexpr bool tensor_parallel_consumer(signature s) {
  return s == signature::column_parallel || s == signature::head_parallel || s == signature::vocab_embedding;
}

struct shard_inputs {
  tensor_mode mode = tensor_mode::d1;
  int depth = 1;
  int micro_batch = 1;
};

constexpr int isqrt(int n) {
  int q = 0;
  while ((q + 1) * (q + 1) <= n) ++q;
  return q;
}
constexpr int icbrt(int n) {
  int q = 0;
  while ((q + 1) * (q + 1) * (q + 1) <= n) ++q;
  return q;
}

// Mesh factors of a Split<n> under the tensor mode: rows (batch) and features division.
struct mesh_factors {
  int rows = 1, features = 1, weight = 1;
};
constexpr mesh_factors mesh_of(tensor_mode mode, int n, int depth) {
  switch (mode) {
    case tensor_mode::d1: return {1, n, n};
    case tensor_mode::d2: { int q = isqrt(n); return {q, q, q * q}; }
    case tensor_mode::d2p5: { int q = isqrt(n / (depth > 0 ? depth : 1)); return {q * depth, q, q * q}; }
    case tensor_mode::d3: { int q = icbrt(n); return {q * q, q, q * q * q}; }
  }
  return {};
}

template <std::size_t NL, std::size_t NT>
struct shard_result {
  std::array<layer_plan, NL> layers{};
  shard_violation violation{};
};

constexpr void add_comm(layer_plan& lp, collective c, group_axis g, pass p, long long elems, int calls = 1) {
  if (c == collective::none || lp.num_comms >= max_layer_comms) return;
  lp.comms[static_cast<std::size_t>(lp.num_comms++)] = comm_desc{c, g, p, elems, calls, -1};
}

// Local share of one parameter under a signature.
constexpr shape_t shard_param(const param_t& prm, signature sig, int n, const mesh_factors& m) {
  shape_t s = prm.shape;
  auto cut = [&](int axis, int by) {
    if (axis >= 0 && axis < s.rank && by > 0) s.dim[static_cast<std::size_t>(axis)] /= by;
  };
  switch (sig) {
    case signature::column_parallel:  // weight [In, Out] on Out; bias on Out
      cut(prm.role == param_role::weight ? 1 : (prm.role == param_role::bias ? 0 : -1), n);
      break;
    case signature::row_parallel:  // weight on In; bias whole (added once after the reduction)
      if (prm.role == param_role::weight) cut(0, n);
      break;
    case signature::vocab_embedding:
    case signature::head_parallel:
    case signature::expert_parallel:
      if (prm.role != param_role::replicated) cut(prm.split_axis, n);
      break;
    case signature::summa_2d:
    case signature::tesseract_2p5d:
      if (prm.role == param_role::weight) { cut(0, m.features); cut(1, m.features); }
      else if (prm.role == param_role::bias) cut(0, m.features);
      break;
    case signature::cube_3d:
      if (prm.role == param_role::weight) { cut(0, m.features * m.features); cut(1, m.features); }
      else if (prm.role == param_role::bias) cut(0, m.features);
      break;
    default: break;
  }
  return s;
}

// The sharding pass over all layers, TaskGraph by TaskGraph, part by part.
template <std::size_t NL, std::size_t NT>
constexpr shard_result<NL, NT> plan_shardings(const std::array<layer_plan, NL>& in_layers,
                                              const std::array<taskgraph_desc, NT>& tgs,
                                              const shard_inputs& ctx) {
  shard_result<NL, NT> r{};
  r.layers = in_layers;
  auto fail = [&](shard_rule rule, int layer, int value, int n) {
    if (r.violation.rule == shard_rule::ok) r.violation = shard_violation{rule, layer, value, n};
  };
  sbp cur = sbp::broadcast;
  int prev_part = -1;
  for (std::size_t t = 0; t < NT; ++t) {
    const taskgraph_desc& tg = tgs[t];
    const int n = tg.devices > 0 ? tg.devices : 1;  // N < 1 is rule [devices-positive]; avoid 0/0 below
    const bool split = tg.kind == strategy_kind::split && n > 1;
    const mesh_factors mesh = split ? mesh_of(ctx.mode, n, ctx.depth) : mesh_factors{n, 1, 1};
    const bool nd = split && ctx.mode != tensor_mode::d1;
    if (tg.part != prev_part) {
      // Data enters a part either from the loader (first part: each device loads the
      // rows it needs) or from the previous part by pairwise send/recv, layout kept.
      if (prev_part < 0) cur = (tg.kind == strategy_kind::replicate && n > 1) ? sbp::split_batch : sbp::broadcast;
      prev_part = tg.part;
    }
    if (nd && ctx.micro_batch % mesh.rows != 0)
      fail(shard_rule::tensor_batch, tg.first_layer, ctx.micro_batch, mesh.rows);
    for (int li = tg.first_layer; li < tg.first_layer + tg.num_layers; ++li) {
      layer_plan& lp = r.layers[static_cast<std::size_t>(li)];
      const layer_desc& d = lp.desc;
      const bool next_is_loss = li + 1 < static_cast<int>(NL) &&
                                r.layers[static_cast<std::size_t>(li + 1)].desc.role == layer_role::loss &&
                                r.layers[static_cast<std::size_t>(li + 1)].taskgraph == static_cast<int>(t);
      sbp need = cur, out = cur;
      signature sig = signature::replicated;
      int rows_div = 1, feat_div = 1;
      if (n == 1) {
        need = out = sbp::broadcast;
      } else if (!split) {  // Replicate<N>, N > 1: every layer data-parallel over the part
        need = out = sbp::split_batch;
        sig = signature::data_parallel;
        rows_div = n;
      } else if (nd) {
        const int mode_code = static_cast<int>(ctx.mode);
        need = out = sbp::block;
        rows_div = mesh.rows;
        feat_div = mesh.features;
        switch (d.role) {
          case layer_role::linear:
            sig = ctx.mode == tensor_mode::d2 ? signature::summa_2d
                  : ctx.mode == tensor_mode::d2p5 ? signature::tesseract_2p5d : signature::cube_3d;
            if (d.in_shape.last() % mesh.features != 0)
              fail(shard_rule::split_features, li, d.in_shape.last(), mesh.features);
            else if (d.out_shape(d.in_shape).last() % mesh.features != 0)
              fail(shard_rule::split_features, li, d.out_shape(d.in_shape).last(), mesh.features);
            break;
          case layer_role::elementwise: sig = signature::pointwise; break;
          case layer_role::layernorm: sig = signature::pointwise; break;
          case layer_role::loss: sig = signature::vocab_loss; break;
          default: fail(shard_rule::tensor_mode_layer, li, mode_code, n); break;
        }
      } else {
        switch (d.role) {
          case layer_role::linear: {
            const int in_f = d.in_shape.last();
            const int out_f = d.out_shape(d.in_shape).last();
            if (cur == sbp::split_feature) {  // Megatron pairing: previous was column-parallel
              sig = signature::row_parallel;
              need = sbp::split_feature;
              out = sbp::partial;
              feat_div = n;
              if (in_f % n != 0) fail(shard_rule::split_features, li, in_f, n);
            } else {
              sig = signature::column_parallel;
              need = sbp::broadcast;
              out = sbp::split_feature;
              if (out_f % n != 0) fail(next_is_loss ? shard_rule::split_vocab : shard_rule::split_features, li, out_f, n);
            }
            break;
          }
          case layer_role::elementwise:
            sig = signature::pointwise;
            need = out = (cur == sbp::partial ? sbp::broadcast : cur);
            if (need == sbp::split_feature) feat_div = n;
            if (need == sbp::split_batch) rows_div = n;
            break;
          case layer_role::reshape:
            sig = signature::pointwise;
            need = out = (cur == sbp::split_batch ? sbp::split_batch
                          : (cur == sbp::split_feature && lp.in.rank <= 1) ? sbp::split_feature
                                                                           : sbp::broadcast);
            if (need == sbp::split_feature) feat_div = n;
            if (need == sbp::split_batch) rows_div = n;
            break;
          case layer_role::embedding:
            sig = signature::vocab_embedding;
            need = sbp::broadcast;
            out = sbp::partial;
            if (d.split_extent % n != 0) fail(shard_rule::split_vocab, li, d.split_extent, n);
            break;
          case layer_role::attention:
            sig = signature::head_parallel;
            need = sbp::broadcast;
            out = sbp::partial;
            feat_div = n;
            if (d.split_extent % n != 0) fail(shard_rule::split_heads, li, d.split_extent, n);
            break;
          case layer_role::moe:
            sig = signature::expert_parallel;
            need = out = sbp::split_batch;
            rows_div = n;
            if (d.split_extent % n != 0) fail(shard_rule::split_experts, li, d.split_extent, n);
            break;
          case layer_role::loss:
            if (cur == sbp::split_feature) {
              sig = signature::vocab_loss;
              need = sbp::split_feature;
              feat_div = n;
            } else {
              need = (cur == sbp::split_batch ? sbp::split_batch : sbp::broadcast);
              if (need == sbp::split_batch) rows_div = n;
            }
            out = need;
            break;
          case layer_role::layernorm:
          case layer_role::opaque:
            need = out = (cur == sbp::split_batch ? sbp::split_batch : sbp::broadcast);
            if (need == sbp::split_batch) rows_div = n;
            break;
        }
      }
      lp.arrives = cur;
      lp.in_layout = need;
      lp.out_layout = out;
      lp.sig = sig;
      lp.rows_div = rows_div;
      lp.features_div = feat_div;

      // Elements of a full-layout buffer for this edge, per micro-batch (the whole
      // micro-batch unless rows are split).
      const long long mb = ctx.micro_batch;
      const long long in_elems = lp.in.numel();
      // Forward conversion into the layer, and its backward dual.
      if (n > 1) {
        const collective fwd = convert(cur, need);
        const long long edge = mb * in_elems;  // the whole tensor a gather/reduce assembles
        add_comm(lp, fwd, group_axis::part, pass::forward, edge);
        // The gradient reaching this layer's input: partial when the layer's weights
        // are sharded and it read a broadcast input; otherwise the same layout.
        // The model's input needs no gradient, so layer 0 has no backward conversion.
        const sbp g_in = (tensor_parallel_consumer(sig) && need == sbp::broadcast) ? sbp::partial : need;
        const sbp g_want = grad_of(cur);
        if (li > 0) add_comm(lp, convert(g_in, g_want), group_axis::part, pass::backward, edge);
      }
      // Collectives inside the layer.
      if (sig == signature::expert_parallel) {
        // dispatch and combine, each way: tokens × top-k copies of width D
        const long long tokens = mb * in_elems / d.in_shape.last() / n;
        const long long routed = tokens * d.in_shape.last() * d.top_k;
        add_comm(lp, collective::all_to_all, group_axis::part, pass::forward, routed, 2);
        add_comm(lp, collective::all_to_all, group_axis::part, pass::backward, routed, 2);
      } else if (sig == signature::vocab_loss) {
        // per row: the max, the sum of exponentials and the target logit
        const long long rows = mb * in_elems / (in_elems > 0 ? lp.in.last() : 1) / rows_div;
        // features are split along a mesh row in 2D/2.5D/3D, across the part in 1D
        add_comm(lp, collective::all_reduce, nd ? group_axis::mesh_row : group_axis::part, pass::forward, rows, 3);
      } else if (nd && d.role == layer_role::layernorm) {
        // mean and variance of rows whose features are spread over a mesh row, both ways
        const long long rows = mb / mesh.rows * (lp.in.numel() / lp.in.last());
        add_comm(lp, collective::all_reduce, group_axis::mesh_row, pass::forward, 2 * rows);
        add_comm(lp, collective::all_reduce, group_axis::mesh_row, pass::backward, 2 * rows);
      } else if (sig == signature::summa_2d || sig == signature::tesseract_2p5d) {
        // SUMMA: q steps, each broadcasting an input block along the row and a weight
        // block along the column; backward does it twice (dX and dW).
        const int q = mesh.features;
        const long long x_block = mb / mesh.rows * lp.in.numel() / q;
        const long long w_block = static_cast<long long>(d.in_shape.last()) * lp.out.last() / (q * q);
        add_comm(lp, collective::broadcast, group_axis::mesh_row, pass::forward, x_block, q);
        add_comm(lp, collective::broadcast, group_axis::mesh_col, pass::forward, w_block, q);
        add_comm(lp, collective::broadcast, group_axis::mesh_row, pass::backward, x_block, 2 * q);
        add_comm(lp, collective::broadcast, group_axis::mesh_col, pass::backward, w_block, 2 * q);
      } else if (sig == signature::cube_3d) {
        // 3D: gather inputs along one axis and weights along another, reduce-scatter outputs
        const int q = mesh.features;
        const long long x_local = mb / mesh.rows * lp.in.numel() / q;
        const long long w_local = static_cast<long long>(d.in_shape.last()) * lp.out.last() / (q * q * q);
        const long long y_local = mb / mesh.rows * lp.out.numel() / q;
        add_comm(lp, collective::all_gather, group_axis::mesh_depth, pass::forward, x_local * q);
        add_comm(lp, collective::all_gather, group_axis::mesh_row, pass::forward, w_local * q);
        add_comm(lp, collective::reduce_scatter, group_axis::mesh_col, pass::forward, y_local * q);
        add_comm(lp, collective::all_gather, group_axis::mesh_col, pass::backward, y_local * q);
        add_comm(lp, collective::reduce_scatter, group_axis::mesh_depth, pass::backward, x_local * q);
        add_comm(lp, collective::reduce_scatter, group_axis::mesh_row, pass::backward, w_local * q);
      }

      // Parameters: local shards and the group that must reduce their gradients.
      lp.local_param_elems = 0;
      for (int pi = 0; pi < d.num_params; ++pi) {
        const param_t& prm = d.params[static_cast<std::size_t>(pi)];
        const shape_t local = shard_param(prm, sig, n, mesh);
        lp.local_params[static_cast<std::size_t>(pi)] = local;
        lp.local_param_elems += local.numel();
        const bool whole = local == prm.shape;
        group_axis g = group_axis::data;
        if (n > 1 && whole && need == sbp::split_batch) g = group_axis::part_data;  // same weights, other rows
        if (sig == signature::tesseract_2p5d && prm.role == param_role::weight) g = group_axis::depth_data;
        // N-D biases are cut by columns only: the rows and depths of a column saw other samples
        if (nd && prm.role == param_role::bias && !whole) g = group_axis::col_data;
        if (nd && whole) g = group_axis::part_data;
        lp.grad_group[static_cast<std::size_t>(pi)] = g;
      }
      lp.local_stash_per_sample = d.stash_elems(lp.in) / (rows_div * feat_div);
      // a device does its share of the work: the weight split for sharded layers (a
      // column-parallel layer reads whole rows but only n-th of the weights), else the
      // share of rows and features it holds
      const bool weight_split = sig == signature::column_parallel || sig == signature::row_parallel ||
                                sig == signature::vocab_embedding || sig == signature::expert_parallel;
      const int share = weight_split ? n : (sig == signature::replicated ? 1 : rows_div * feat_div);
      lp.local_flops_per_sample = (d.forward_flops(lp.in) + d.backward_flops(lp.in)) / (share > 0 ? share : 1);
      cur = out;
    }
  }
  return r;
}

}  // namespace detail
}  // namespace strata
