#pragma once
// Sharding: every activation edge gets a layout (OneFlow's SBP: split / broadcast /
// partial-sum) and every layer a signature; the collective that converts one layout
// into the next is derived here, forward and backward, never written by hand.
#include <array>
#include <string_view>
#include <tuple>

#include "strata/core/sbp.hpp"
#include "strata/layers/layer.hpp"
#include "strata/strategy/options.hpp"

namespace strata {

struct taskgraph_desc {
  strategy_kind kind = strategy_kind::replicate;
  int devices = 1;
  int part = 0;
  int first_layer = 0;
  int num_layers = 0;
  bool is_default = false;
  bool context = false;  // Context<N>: the sequence split over the devices
  int tensor = 1;        // Context<N, Split<T>>: T, the tensor split inside it (devices = N·T)
  // Context<N, Split<T>>: N; Context<N>: the devices; else 1
  constexpr int context_ways() const { return context ? (devices > 0 ? devices : 1) / (tensor > 0 ? tensor : 1) : 1; }
};

// A tied parameter: parameter user_param of layer `user` is parameter owner_param of
// layer `owner` (layers/layer.hpp's tied_param); user < 0: none.
struct tie_info {
  int user = -1, user_param = -1, owner = -1, owner_param = -1;
  constexpr bool any() const { return user >= 0; }
  constexpr bool is_user(int layer, int k) const { return layer == user && k == user_param; }
};

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
  int num_conversion_comms = 0;  // comms[0, this) convert layouts; the rest are the layer's own
  std::array<shape_t, max_layer_params> local_params{};
  std::array<group_axis, max_layer_params> grad_group{};
  long long local_param_elems = 0;
  int rows_div = 1;      // local rows = micro-batch rows / rows_div
  int features_div = 1;  // local share of the features
  int context = 1;       // Context<N>: each device holds 1/context of every sample's rows
  context_mode exchange = context_mode::all_gather;  // ... and how attention exchanges
  bool partial_input_grad = false;  // the input's gradient comes out as a partial sum
  long long local_flops_per_sample = 0;  // forward + backward, this device's share
  // 3D: the input's features lie along the mesh depth, not the columns. A 3D Linear moves
  // the features from one cube axis to another, so the layout turns with every 3D Linear
  // (as Colossal-AI's alternating input/output parallel modes).
  bool turned = false;
  // 3D: the input features of the projection each parameter belongs to lie along the depth
  // (a layer's second projection reads its first's output: the other turn)
  std::array<bool, max_layer_params> param_turned{};
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

// The layout of the gradient a layer produces for its input: a partial sum when its
// sharded weights read a broadcast input (Megatron's "f"), else its input's layout.
constexpr sbp input_grad_layout(const layer_plan& lp) {
  return lp.partial_input_grad && lp.in_layout == sbp::broadcast ? sbp::partial : lp.in_layout;
}

struct shard_inputs {
  tensor_mode mode = tensor_mode::d1;
  int depth = 1;
  int micro_batch = 1;
  bool sequence_parallel = false;
  context_mode exchange = context_mode::all_gather;  // Context<N>: attention's exchange
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

// Which block of an S(0,-1) activation device `index` of an N-D Split part holds: the row
// block (of mesh rows) and the feature block (of q), with (row i, col j, depth k) the
// device's mesh coordinates (index = (k·q + i)·q + j). 2D: (i, j); 2.5D: (k·q + i, j);
// 3D: (i·q + k, j), turned (i·q + j, k).
struct act_block {
  int row = 0, feature = 0;
};
constexpr act_block block_of(tensor_mode mode, int q, int index, bool turned) {
  const int j = index % q, i = (index / q) % q, k = index / (q * q);
  switch (mode) {
    case tensor_mode::d1: return {0, index};
    case tensor_mode::d2: return {i, j};
    case tensor_mode::d2p5: return {k * q + i, j};
    case tensor_mode::d3: return turned ? act_block{i * q + j, k} : act_block{i * q + k, j};
  }
  return {};
}

// The block of parameter `k` of a layer that device `index` of its part holds, numbered
// row-major over the tensor's block grid (exec::logical_index's numbering); 0 for a whole
// tensor. 1D cuts one axis: the device's index. 2D/2.5D: W[i, j], b[j]. 3D: a projection reads
// X[·, f] and writes Y[·, g] (f, g the input and output feature blocks) with W[f, g] cut
// again by the mesh rows: W block (f·q + i, g), b[g].
constexpr int param_block(const layer_plan& lp, int k, tensor_mode mode, int q, int index) {
  const auto K = static_cast<std::size_t>(k);
  if (lp.local_params[K] == lp.desc.params[K].shape) return 0;
  if (mode == tensor_mode::d1) return index;
  const bool weight = lp.desc.params[K].role == param_role::weight;
  const int j = index % q, i = (index / q) % q, kk = index / (q * q);
  if (mode != tensor_mode::d3) return weight ? i * q + j : j;
  const bool t = lp.param_turned[K];
  const int f = t ? kk : j, g = t ? j : kk;
  return weight ? (f * q + i) * q + g : g;
}

template <std::size_t NL, std::size_t NT>
struct shard_result {
  std::array<layer_plan, NL> layers{};
  diagnosis violation{};  // the first sharding rule broken, in its template's argument order
};

constexpr void add_comm(layer_plan& lp, collective c, group_axis g, pass p, long long elems, int calls = 1,
                        bool stats = false) {
  if (c == collective::none || lp.num_comms >= max_layer_comms) return;
  lp.comms[static_cast<std::size_t>(lp.num_comms++)] = comm_desc{c, g, p, elems, calls, -1, stats};
}

// Local share of one parameter: cut `by` ways on `axis` (−1: whole).
constexpr shape_t cut_param(shape_t s, int axis, int by) {
  if (axis >= 0 && axis < s.rank && by > 0) s.dim[static_cast<std::size_t>(axis)] /= by;
  return s;
}

// N-D tensor modes (Colossal-AI): weights cut over the mesh, biases over its columns.
constexpr shape_t nd_param(const param_t& prm, signature sig, const mesh_factors& m) {
  shape_t s = prm.shape;
  if (prm.role == param_role::weight) {
    s = cut_param(s, 0, sig == signature::cube_3d ? m.features * m.features : m.features);
    s = cut_param(s, 1, m.features);
  } else if (prm.role == param_role::bias) {
    s = cut_param(s, 0, m.features);
  }
  return s;
}

// Elements of one collective as comm_desc counts them, for a conversion of a tensor of
// `whole` elements over n devices: all-to-all passes this device's share, the others
// the whole tensor (the all-reduce buffer, the reduce-scatter input, the all-gather output).
constexpr long long conversion_elems(collective c, long long whole, int n) {
  return c == collective::all_to_all ? whole / (n > 0 ? n : 1) : whole;
}

// The collectives of one Linear (or projection) of in → out features under 2D/2.5D/3D, per
// micro-batch, `rows` token rows on this device; appended to lp's list in the order the
// layer reads them (layers/linear_mesh.hpp). Returns whether its output turned (3D).
//
// SUMMA (2D; 2.5D on each depth layer, weights repeated). Forward: q steps, each
// broadcasting an input block along the mesh row and a weight block along the column.
// Backward: dW = Xᵀ·dY by the same q input-block broadcasts, each device's q partial
// products reduce-scattered along the column; dX = dY·Wᵀ by the q weight blocks again, its
// partial products reduce-scattered along the row. (Colossal-AI reduces each step's
// product to one device; a reduce-scatter of all q is the same bytes in one call.)
//
// 3D: the input's features lie along axis F (mesh columns, or the depth when turned), its
// rows are cut by the other two. The input is all-gathered along the third axis A, the
// weight (cut again by mesh rows) along the column group, and the q partial outputs
// reduce-scattered along F: the output's features lie along A, so the next 3D Linear
// swaps the two. Backward gathers dY along F and reduce-scatters dW along the column
// group and dX along A; the gathered X and W are kept from forward.
//
// Weight gradients are summed in master precision: elements of the statistics type.
constexpr bool add_mesh_linear(layer_plan& lp, signature sig, const mesh_factors& mesh, long long rows, long long in,
                               long long out, bool turned, bool dx) {
  const int q = mesh.features;
  if (sig == signature::cube_3d) {
    const group_axis ax = turned ? group_axis::mesh_row : group_axis::mesh_depth;
    const group_axis af = turned ? group_axis::mesh_depth : group_axis::mesh_row;
    const long long x_local = rows * in / q, w_local = in * out / (q * q * q), y_local = rows * out / q;
    add_comm(lp, collective::all_gather, ax, pass::forward, x_local * q);
    add_comm(lp, collective::all_gather, group_axis::mesh_col, pass::forward, w_local * q);
    add_comm(lp, collective::reduce_scatter, af, pass::forward, y_local * q);
    add_comm(lp, collective::all_gather, af, pass::backward, y_local * q);
    add_comm(lp, collective::reduce_scatter, group_axis::mesh_col, pass::backward, w_local * q, 1, true);
    if (dx) add_comm(lp, collective::reduce_scatter, ax, pass::backward, x_local * q);
    return !turned;
  }
  const long long x_block = rows * in / q, w_block = in * out / (q * q);
  add_comm(lp, collective::broadcast, group_axis::mesh_row, pass::forward, x_block, q);
  add_comm(lp, collective::broadcast, group_axis::mesh_col, pass::forward, w_block, q);
  add_comm(lp, collective::broadcast, group_axis::mesh_row, pass::backward, x_block, q);
  add_comm(lp, collective::reduce_scatter, group_axis::mesh_col, pass::backward, w_block * q, 1, true);
  if (dx) {
    add_comm(lp, collective::broadcast, group_axis::mesh_col, pass::backward, w_block, q);
    add_comm(lp, collective::reduce_scatter, group_axis::mesh_row, pass::backward, x_block * q);
  }
  return turned;
}

// Whether layer i's input gradient is computed: a layer before it has parameters, or
// it must flow back to an earlier pipeline part (whose program waits for it).
template <std::size_t NL>
constexpr std::array<bool, NL> input_grads_needed(const std::array<layer_plan, NL>& lp) {
  std::array<bool, NL> need{};
  bool params_before = false;
  for (std::size_t i = 0; i < NL; ++i) {
    need[i] = params_before || lp[i].part > 0;
    params_before = params_before || lp[i].desc.num_params > 0;
  }
  return need;
}

// The sharding pass over all layers, TaskGraph by TaskGraph, part by part.
template <std::size_t NL, std::size_t NT>
constexpr shard_result<NL, NT> plan_shardings(const std::array<layer_plan, NL>& in_layers,
                                              const std::array<taskgraph_desc, NT>& tgs,
                                              const shard_inputs& ctx) {
  shard_result<NL, NT> r{};
  r.layers = in_layers;
  auto fail = [&](diagnosis d) {
    if (r.violation.ok()) r.violation = d;
  };
  const std::array<bool, NL> need_dx = input_grads_needed(r.layers);
  // open residuals: the layout of each skip connection, innermost last
  std::array<sbp, NL + 1> skips{};
  int open = 0;
  sbp cur = sbp::broadcast;
  bool turned = false;  // 3D: features of the current block layout along the depth
  std::array<bool, NL + 1> skip_turned{};  // ... and of each open residual's skip
  int prev_part = -1;
  for (std::size_t t = 0; t < NT; ++t) {
    const taskgraph_desc& tg = tgs[t];
    // Context<N, Split<T>>: the layers shard T ways (over the tensor group) as under Split<T>,
    // every layout holding 1/N of each sample's rows, attention exchanging over the context group
    const int cn = tg.context_ways();
    const bool context_split = tg.context && tg.tensor > 1 && cn > 1;  // Context<1, Split<T>>: Split<T>
    const group_axis own_axis = context_split ? group_axis::tensor : group_axis::part;
    // N < 1 is rule [devices-positive]; avoid 0/0 below
    const int n = context_split ? tg.tensor : tg.devices > 0 ? tg.devices : 1;
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
      fail({rule_id::tensor_batch, ctx.micro_batch, mesh.rows});
    for (int li = tg.first_layer; li < tg.first_layer + tg.num_layers; ++li) {
      layer_plan& lp = r.layers[static_cast<std::size_t>(li)];
      const layer_desc& d = lp.desc;
      const bool next_is_loss = li + 1 < static_cast<int>(NL) &&
                                r.layers[static_cast<std::size_t>(li + 1)].desc.role == layer_role::loss &&
                                r.layers[static_cast<std::size_t>(li + 1)].taskgraph == static_cast<int>(t);
      // Context<N>: every sample's rows cut N ways (exec: the batch arranged chunk-major); a
      // layer that mixes positions (attention) brings its collectives over the context group.
      // A sample's positions: its rows, or the [Seq] token ids the first layer reads; any other
      // input of one row per sample has no sequence to split (1 position: refused for N > 1).
      auto cut_context = [&](shard_choice& c) {
        const bool token_ids = li == 0 && d.reads_ids && lp.in.rows() == 1;
        const long long positions = token_ids ? lp.in.last() : lp.in.rows();
        const int pieces = cn * context_segments(cn, ctx.exchange);  // two per device under all-gather and ring
        if (positions % pieces != 0) fail({rule_id::context_seq, li, static_cast<int>(positions), pieces});
        shard_query cq{cur, cn, lp.in, lp.out, d.split_extent, ctx.micro_batch, next_is_loss, ctx.sequence_parallel,
                       ctx.exchange};
        cq.tensor = context_split ? n : 1;
        const shard_choice own = d.context_shard(cq);
        if (own.violated != rule_id::ok) fail({own.violated, li, own.violated_value, cn});
        for (int k = 0; k < own.num_comms; ++k) {
          const comm_desc& x = own.comms[static_cast<std::size_t>(k)];
          c.add(x.kind, x.group, x.when, x.elems, x.calls, x.stats);
        }
        lp.context = cn;
        lp.exchange = ctx.exchange;
      };
      shard_choice c;
      mesh_choice m{};
      std::array<shape_t, max_layer_params> local{};
      for (int pi = 0; pi < d.num_params; ++pi) local[static_cast<std::size_t>(pi)] = d.params[static_cast<std::size_t>(pi)].shape;
      if (n == 1) {
        c.need = c.out = sbp::broadcast;
      } else if (!split) {  // Replicate<N>, N > 1: every layer data-parallel over the part
        c.sig = signature::data_parallel;
        c.need = c.out = sbp::split_batch;
        c.rows_div = c.flops_div = n;
        if (tg.context) cut_context(c);
        // a layer normalising over the micro-batch (batch normalisation) sums its statistics
        // over the part's shares of the samples
        const shard_choice data = d.data_shard(shard_query{cur, n, lp.in, lp.out, d.split_extent, ctx.micro_batch,
                                                           next_is_loss, ctx.sequence_parallel, ctx.exchange});
        if (data.violated != rule_id::ok) fail({data.violated, li, data.violated_value, n});
        for (int k = 0; k < data.num_comms; ++k) {
          const comm_desc& m = data.comms[static_cast<std::size_t>(k)];
          c.add(m.kind, m.group, m.when, m.elems, m.calls, m.stats);
        }
        // an auxiliary loss (MoE's load balance) wants statistics of the whole micro-batch:
        // the devices' shares are summed
        if (d.aux_loss_stats > 0)
          c.add(collective::all_reduce, group_axis::part, pass::forward, d.aux_loss_stats, 1, /*stats=*/true);
      } else if (nd) {
        c.need = c.out = sbp::block;
        c.rows_div = mesh.rows;
        c.feat_div = mesh.features;
        c.flops_div = mesh.rows * mesh.features;
        const signature linear = ctx.mode == tensor_mode::d2     ? signature::summa_2d
                                 : ctx.mode == tensor_mode::d2p5 ? signature::tesseract_2p5d
                                                                 : signature::cube_3d;
        m = d.mesh_shard(mesh_query{linear, mesh.features, lp.in, lp.out, d.split_extent});
        c.sig = m.sig;
        if (!m.supported) fail({rule_id::tensor_mode_layer, li, static_cast<int>(ctx.mode)});
        else if (m.violated != rule_id::ok) fail({m.violated, li, m.violated_value, mesh.features});
        for (int pi = 0; pi < d.num_params; ++pi)
          if (m.param_projection[static_cast<std::size_t>(pi)] >= 0)
            local[static_cast<std::size_t>(pi)] = nd_param(d.params[static_cast<std::size_t>(pi)], c.sig, mesh);
      } else {
        c = d.shard(
            shard_query{cur, n, lp.in, lp.out, d.split_extent, ctx.micro_batch, next_is_loss, ctx.sequence_parallel});
        if (d.role == layer_role::residual_end && open > 0) {
          // the branch's output is converted into the skip's layout
          c = shard_choice{};
          c.sig = signature::pointwise;
          c.need = c.out = skips[static_cast<std::size_t>(open - 1)];
          sharding::split_share(c, n);
        }
        if (c.violated != rule_id::ok) fail({c.violated, li, c.violated_value, n});
        if (context_split) {  // the layer's collectives over its tensor group, on 1/N of the rows
          for (int k = 0; k < c.num_comms; ++k) {
            comm_desc& x = c.comms[static_cast<std::size_t>(k)];
            if (x.group == group_axis::part) x.group = group_axis::tensor;
            x.elems /= cn;
          }
          c.rows_div *= cn;
          c.flops_div *= cn;
          // experts route a micro-batch's tokens by statistics and capacities of the whole
          // micro-batch, which a context group holds 1/N of
          if (c.sig == signature::expert_parallel) fail({rule_id::context_experts, li, cn, n});
          cut_context(c);
        }
        // a row split keeps whole rows: micro-batch rows (tokens) divisible by the devices;
        // under Context<N, Split<T>> each piece's rows, over T/pieces devices
        const int segs = context_segments(cn, ctx.exchange);
        const long long piece_rows = ctx.micro_batch * lp.in.rows() / (cn * segs);
        if (context_split && c.need == sbp::split_batch && (n % segs != 0 || piece_rows % (n / segs) != 0))
          fail({rule_id::context_sequence_parallel, li, n, segs, static_cast<int>(piece_rows)});
        else if (c.need == sbp::split_batch && (ctx.micro_batch * lp.in.rows()) % n != 0)
          fail({rule_id::split_rows, li, ctx.micro_batch * lp.in.rows(), n});
        for (int pi = 0; pi < d.num_params; ++pi)
          local[static_cast<std::size_t>(pi)] =
              cut_param(d.params[static_cast<std::size_t>(pi)].shape, c.param_axis[static_cast<std::size_t>(pi)], n);
      }
      if (!nd) turned = false;
      lp.turned = turned;
      if (d.role == layer_role::residual_begin) {
        skip_turned[static_cast<std::size_t>(open)] = turned;
        skips[static_cast<std::size_t>(open++)] = c.out;
      }
      if (d.role == layer_role::shortcut_end && open > 0) {
        // the residual's input goes on in its layout; the shortcut's output is the skip now
        c.out = skips[static_cast<std::size_t>(open - 1)];
        skips[static_cast<std::size_t>(open - 1)] = c.need;
        const bool shortcut_turned = turned;
        turned = skip_turned[static_cast<std::size_t>(open - 1)];
        skip_turned[static_cast<std::size_t>(open - 1)] = shortcut_turned;
      }
      if (d.role == layer_role::residual_end && open > 0) {
        // a 3D branch with an odd number of Linears hands back features along the other axis
        if (nd && skip_turned[static_cast<std::size_t>(open - 1)] != turned) fail({rule_id::tensor_residual, li});
        --open;
      }
      lp.arrives = cur;
      lp.in_layout = c.need;
      lp.out_layout = c.out;
      lp.sig = c.sig;
      lp.rows_div = c.rows_div;
      lp.features_div = c.feat_div;
      lp.partial_input_grad = c.partial_input_grad;

      // The whole tensor a conversion into this layer assembles, per micro-batch.
      const long long edge = ctx.micro_batch * lp.in.numel() / (context_split ? cn : 1);
      if (n > 1) {
        const collective fwd = convert(cur, c.need);
        add_comm(lp, fwd, own_axis, pass::forward, conversion_elems(fwd, edge, n));
        // Backward: the gradient this layer produces for its input, back into the
        // layout its producer holds (only where the input gradient is computed).
        if (need_dx[static_cast<std::size_t>(li)]) {
          const collective bwd = convert(input_grad_layout(lp), grad_of(cur));
          add_comm(lp, bwd, own_axis, pass::backward, conversion_elems(bwd, edge, n));
        }
      }
      lp.num_conversion_comms = lp.num_comms;
      // Collectives inside the layer.
      for (int k = 0; k < c.num_comms; ++k) {
        const comm_desc& x = c.comms[static_cast<std::size_t>(k)];
        add_comm(lp, x.kind, x.group, x.when, x.elems, x.calls, x.stats);
      }
      // The devices that hold the other features of this layer's rows (N-D modes).
      const group_axis features_axis = turned ? group_axis::mesh_depth : group_axis::mesh_row;
      const bool dx = need_dx[static_cast<std::size_t>(li)];
      const long long rows_here = ctx.micro_batch / mesh.rows * lp.in.rows();
      // turn_at[p]: the turn projection p reads (3D), turn_at[num_projections] what the layer hands on
      std::array<bool, std::tuple_size_v<decltype(m.projections)> + 1> turn_at{};
      turn_at[0] = turned;
      if (nd && m.row_moments) {
        // Σx and Σx² of rows whose features are spread over the mesh row; backward, Σg and
        // Σg·x̂ (only for the input's gradient: dγ and dβ need the forward's statistics only)
        add_comm(lp, collective::all_reduce, features_axis, pass::forward, 2 * rows_here, 1, true);
        if (dx) add_comm(lp, collective::all_reduce, features_axis, pass::backward, 2 * rows_here, 1, true);
      } else if (nd && c.sig == signature::vocab_loss) {
        add_comm(lp, collective::all_reduce, features_axis, pass::forward, rows_here, 3, true);
      } else if (nd) {
        // projections after the first read the layer's own intermediate: their dX is always wanted
        for (int p = 0; p < m.num_projections; ++p) {
          const mesh_projection& pr = m.projections[static_cast<std::size_t>(p)];
          turned = add_mesh_linear(lp, c.sig, mesh, rows_here, pr.in, pr.out, turned, dx || p > 0);
          turn_at[static_cast<std::size_t>(p + 1)] = turned;
        }
      }

      // Parameters: local shards and the group that must reduce their gradients.
      lp.local_param_elems = 0;
      for (int pi = 0; pi < d.num_params; ++pi) {
        const param_t& prm = d.params[static_cast<std::size_t>(pi)];
        const shape_t sh = local[static_cast<std::size_t>(pi)];
        // the turn its projection reads, and the one it writes (where its bias lies)
        const int pp = m.param_projection[static_cast<std::size_t>(pi)];
        const int proj = pp < 0 ? 0 : pp < m.num_projections ? pp : m.num_projections;
        const bool reads_turned = turn_at[static_cast<std::size_t>(proj)];
        const bool writes_turned = turn_at[static_cast<std::size_t>(proj < m.num_projections ? proj + 1 : proj)];
        lp.param_turned[static_cast<std::size_t>(pi)] = reads_turned;
        lp.local_params[static_cast<std::size_t>(pi)] = sh;
        lp.local_param_elems += sh.numel();
        const bool whole = sh == prm.shape;
        // Context<N, Split<T>>: the devices of one tensor index saw the other positions
        group_axis g = context_split ? group_axis::context_data : group_axis::data;
        if (n > 1 && whole && c.need == sbp::split_batch) g = group_axis::part_data;  // same weights, other rows
        if (c.sig == signature::tesseract_2p5d && prm.role == param_role::weight) g = group_axis::depth_data;
        // N-D biases are cut by the output's feature blocks only: the devices of that block
        // (a mesh column; in 3D, a depth plane when the output turned) saw other rows
        if (nd && prm.role == param_role::bias && !whole)
          g = c.sig == signature::cube_3d && writes_turned ? group_axis::plane_data : group_axis::col_data;
        if (nd && whole) g = group_axis::part_data;
        lp.grad_group[static_cast<std::size_t>(pi)] = g;
      }
      lp.local_flops_per_sample = (d.forward_flops(lp.in) + d.backward_flops(lp.in)) / (c.flops_div > 0 ? c.flops_div : 1);
      cur = c.out;
    }
  }
  return r;
}

}  // namespace detail
}  // namespace strata
