#pragma once
// MultiHeadAttention<D, Heads, Seq, Causal, RopeBase>: self-attention over [Seq, D] with a
// fused QKV projection and an output projection, optionally causal (a token attends to
// itself and the tokens before it: GPT), optionally with rotary positions (RopeBase > 0:
// q and k of each head rotated by their token's position, RoFormer / Llama, base 10000 for
// Llama 2, 500000 for Llama 3). Under Split<N> heads are divided among devices (Megatron):
// the QKV projection column-parallel, the output projection row-parallel, so its output
// is a partial sum the planner reduces once.
//
// Parameters: w_qkv [D, 3D] whose columns are, head after head, that head's q, k and v
// blocks of D/Heads (so a contiguous cut of the columns is a set of whole heads), b_qkv
// [3D] alike, w_out [D, D] whose rows follow the heads, b_out [D].
//
// Under 2D/2.5D/3D tensor parallelism the heads are divided over the mesh columns and the
// sequences over the mesh rows: both projections run as the mode's Linear on S(0,-1)
// blocks (layers/linear_mesh.hpp), the attention itself on the device's heads and rows.
// b_out is whole on every device; each adds (and takes the gradient of) its feature slice.
//
// The attention itself is flash attention (backend/attention.hpp): no Seq × Seq matrix is
// ever formed, and the stash keeps per token q, k, v, the context and one log-sum-exp per
// head, so activation memory is linear in Seq.
#include <cmath>

#include "strata/core/rules.hpp"
#include "strata/layers/layer.hpp"
#include "strata/layers/linear_mesh.hpp"

namespace strata::layers {

template <int D, int Heads, int Seq, bool Causal = false, int RopeBase = 0>
struct MultiHeadAttention {
  static_assert(rule::layer_dim_positive<D, Heads>::value && rule::layer_dim_positive<Seq, Seq>::value);
  static_assert(rule::attention_heads_divide_dim<D, Heads>::value);
  static_assert(rule::rope_head_dim_even<(Heads > 0 ? D / Heads : 0), RopeBase>::value);
  static constexpr std::string_view name = Causal ? "CausalSelfAttention" : "MultiHeadAttention";
  static constexpr layer_role role = layer_role::attention;
  static constexpr int features = D;
  static constexpr int heads = Heads;
  static constexpr int seq = Seq;
  static constexpr bool causal = Causal;
  static constexpr int rope_base = RopeBase;  // 0: no rotary positions
  static constexpr int head_dim = D / Heads;
  static constexpr int split_extent = Heads;
  static constexpr shape_t in_shape = shape_v<Seq, D>;
  static constexpr shape_t out_shape(shape_t in) { return in; }
  static constexpr std::array<param_t, 4> params{{{"w_qkv", shape_v<D, 3 * D>, param_role::weight, 1},
                                                  {"b_qkv", shape_v<3 * D>, param_role::bias, 0},
                                                  {"w_out", shape_v<D, D>, param_role::weight, 0},
                                                  {"b_out", shape_v<D>, param_role::replicated, -1}}};
  static constexpr long long forward_flops(shape_t) {
    const long long s = Seq, d = D;
    return 2 * s * d * 3 * d + 4 * s * s * d + 2 * s * d * d;
  }
  static constexpr long long backward_flops(shape_t in) { return 2 * forward_flops(in); }

  static constexpr shard_choice shard(const shard_query& q) {
    shard_choice c;
    c.sig = signature::head_parallel;
    c.need = sbp::broadcast;
    c.out = sbp::partial;
    c.feat_div = q.n;
    c.flops_div = q.n;
    c.partial_input_grad = true;
    c.param_axis = {1, 0, 0, -1, -1, -1};  // QKV on its outputs, the out-projection on its inputs
    if (Heads % q.n != 0) c.violate(rule_id::split_heads, Heads);
    return c;
  }
  // 2D/2.5D/3D: heads divided over the mesh columns (whole heads per feature block); the QKV
  // projection (w_qkv, b_qkv), then the output projection (w_out, b_out) as the mode's Linear.
  static constexpr mesh_choice mesh_shard(const mesh_query& q) {
    mesh_choice c;
    c.sig = q.linear;
    if (Heads % q.q != 0) c.violate(rule_id::split_heads, Heads);
    c.project(D, 3 * D);
    c.project(D, D);
    c.param_projection = {0, 0, 1, 1, -1, -1};
    return c;
  }
  // The cost model's GEMMs (one device, 1D): the two projections over this device's heads,
  // and the attention core of its sequences × heads.
  static constexpr call_gemms gemms(const local_dims& d) {
    const double split = d.sig == signature::head_parallel ? d.n : 1;
    const double rows = static_cast<double>(d.rows), dm = D, local_heads = Heads / split, dh = dm / Heads;
    const double width = local_heads * dh;
    call_gemms g;
    g.add({1, rows, 3 * width, dm, true});  // QKV projection
    g.add({1, rows, dm, width, true});      // output projection
    g.scores = {rows / Seq * local_heads, static_cast<double>(Seq), dh};
    return g;
  }

  // Kept: x (for dW_qkv); stash: this device's heads' q, k, v and context (head-major),
  // the context as token rows (for dW_out), and each (token, head)'s log-sum-exp (a
  // statistic). Scratch: the QKV rows (forward), and the gradients (backward): all linear
  // in the tokens. 2D/2.5D/3D: each projection's own stash after those, and the larger of
  // their scratch after the attention's.
  static constexpr buffer_needs memory(const local_dims& d) {
    const long long split = d.sig == signature::head_parallel ? d.n : d.q > 0 ? d.q : 1;
    const long long rows = d.rows, width = rows * D / split;
    buffer_needs b{.keep_input = true, .stash_values = 5 * width, .stash_stats = rows * (Heads / split),
                   .scratch_values = 8 * width, .weight_pass = d.q == 0, .weight_keep = d.q == 0 ? 3 * width : 0};
    if (d.q > 0) {
      const buffer_needs in = projection_memory(d, 3), out = projection_memory(d, 1);
      b.stash_values += in.stash_values + out.stash_values;
      b.scratch_values += in.scratch_values > out.scratch_values ? in.scratch_values : out.scratch_values;
      b.scratch_stats = in.scratch_stats > out.scratch_stats ? in.scratch_stats : out.scratch_stats;
    }
    return b;
  }

  template <class C>
  static void forward(C& c) {
    using T = typename C::value_type;
    using S = gemm_scalar_t<T>;
    const shapes s = local(c);
    T* q_h = c.stash_values;  // [q_h | k_h | v_h | ctx rows | ctx_h], lse in the stats
    T* ctx = q_h + 3 * s.width;
    T* ctx_h = ctx + s.width;
    T* qkv = c.scratch_values;
    if (on_mesh(c)) {
      C p = projection(c, s, 0);
      p.x = c.x;
      p.y = qkv;
      mesh_forward(p, c.w[1]);
    } else {
      gemm_bias_act(c.q, backend::trans::N, backend::trans::N, c.rows, 3 * s.w, std::size_t(D), S(1), c.x,
                    std::size_t(D), c.w[0], 3 * s.w, S(0), qkv, 3 * s.w, c.w[1], backend::activation::none,
                    static_cast<T*>(nullptr));
    }
    heads_from_rows(c.q, s.seqs, std::size_t(Seq), s.heads, 3, std::size_t(head_dim), qkv, q_h);
    rotate(c, s, q_h, false);  // q and k at their tokens' positions (the stash keeps them rotated)
    flash_attention_forward(c.q, flash(s), static_cast<const T*>(q_h), static_cast<const T*>(q_h + s.width),
                            static_cast<const T*>(q_h + 2 * s.width), ctx_h, c.stash_stats);
    rows_from_heads(c.q, s.seqs, std::size_t(Seq), s.heads, 1, std::size_t(head_dim), ctx_h, ctx);
    if (on_mesh(c)) {
      C p = projection(c, s, 1);
      p.x = ctx;
      p.y = c.y;
      mesh_forward(p, c.w[3] + c.col0);
      return;
    }
    // the output projection; a head-parallel output is a partial sum: its bias is added once
    const T* bias = c.sig != signature::head_parallel || c.index == 0 ? c.w[3] : nullptr;
    gemm_bias_act(c.q, backend::trans::N, backend::trans::N, c.rows, std::size_t(D), s.w, S(1), ctx, s.w, c.w[2],
                  std::size_t(D), S(0), c.y, std::size_t(D), bias, backend::activation::none,
                  static_cast<T*>(nullptr));
  }

  template <class C>
  static void backward(C& c) {
    if (on_mesh(c)) return backward_on_mesh(c);
    const auto dqkv = grads<typename C::value_type>(c.scratch_values, local(c).width).dqkv;
    backward_input(c, dqkv);
    backward_params(c, dqkv);
  }
  // Zero-bubble halves (1D only; a mesh runs whole): B leaves the QKV rows' gradient in
  // c.keep for W.
  template <class C>
  static void backward_data(C& c) {
    if (on_mesh(c)) return backward_on_mesh(c);
    backward_input(c, c.keep);
  }
  template <class C>
  static void backward_weights(C& c) {
    if (!on_mesh(c)) backward_params(c, c.keep);
  }

 private:
  // The backward's scratch, in widths: [dctx | dctx_h | dq_h dk_h dv_h | dqkv rows].
  template <class T>
  struct grads {
    T *dctx, *dctx_h, *dq_h, *dqkv;
    grads(T* base, std::size_t w) : dctx(base), dctx_h(base + w), dq_h(base + 2 * w), dqkv(base + 5 * w) {}
  };
  // dctx = dy W_outᵀ, the attention's backward, dqkv (into `dqkv`), dx = dqkv W_qkvᵀ (a
  // partial sum over heads).
  template <class C>
  static void backward_input(C& c, typename C::value_type* dqkv) {
    using S = gemm_scalar_t<typename C::value_type>;
    const shapes s = local(c);
    const grads<typename C::value_type> g(c.scratch_values, s.width);
    const auto N = backend::trans::N, Tr = backend::trans::T;
    gemm(c.q, N, Tr, c.rows, s.w, std::size_t(D), S(1), c.dy, std::size_t(D), c.w[2], std::size_t(D), S(0), g.dctx,
         s.w);
    attention_core_backward(c, s, g, dqkv);
    if (c.dx)
      gemm(c.q, N, Tr, c.rows, std::size_t(D), 3 * s.w, S(1), dqkv, 3 * s.w, c.w[0], 3 * s.w, S(0), c.dx,
           std::size_t(D));
  }
  // dW_out += ctxᵀ dy, db_out += Σ dy, dW_qkv += xᵀ dqkv, db_qkv += Σ dqkv.
  template <class C>
  static void backward_params(C& c, const typename C::value_type* dqkv) {
    using T = typename C::value_type;
    using S = gemm_scalar_t<T>;
    const shapes s = local(c);
    const T* ctx = c.stash_values + 3 * s.width;
    const auto N = backend::trans::N, Tr = backend::trans::T;
    gemm(c.q, Tr, N, s.w, std::size_t(D), c.rows, S(1), ctx, s.w, c.dy, std::size_t(D), S(1), c.g[2], std::size_t(D));
    bias_grad(c.q, c.rows, std::size_t(D), c.dy, c.g[3], true);
    gemm(c.q, Tr, N, std::size_t(D), 3 * s.w, c.rows, S(1), c.x, std::size_t(D), dqkv, 3 * s.w, S(1), c.g[0], 3 * s.w);
    bias_grad(c.q, c.rows, 3 * s.w, dqkv, c.g[1], true);
  }
  // From g.dctx (token rows) and the stash [q_h | k_h | v_h | ctx | ctx_h] with the
  // log-sum-exps: flash attention's backward (each tile's probabilities recomputed), and
  // dq, dk, dv as the QKV rows' gradient into `dqkv`.
  template <class C, class G>
  static void attention_core_backward(C& c, const auto& s, const G& g, typename C::value_type* dqkv) {
    using T = typename C::value_type;
    const std::size_t seq = Seq, dh = head_dim;
    const T* q_h = c.stash_values;
    heads_from_rows(c.q, s.seqs, seq, s.heads, 1, dh, g.dctx, g.dctx_h);
    flash_attention_backward(c.q, flash(s), q_h, q_h + s.width, q_h + 2 * s.width, q_h + 4 * s.width,
                             static_cast<const T*>(g.dctx_h), static_cast<const typename C::stat_type*>(c.stash_stats),
                             g.dq_h, g.dq_h + s.width, g.dq_h + 2 * s.width);
    rotate(c, s, g.dq_h, true);  // back through the rotation: its transpose
    rows_from_heads(c.q, s.seqs, seq, s.heads, 3, dh, g.dq_h, dqkv);
  }
  // 2D/2.5D/3D: both projections as the mode's Linear, whole.
  template <class C>
  static void backward_on_mesh(C& c) {
    const shapes s = local(c);
    const grads<typename C::value_type> g(c.scratch_values, s.width);
    C p = projection(c, s, 1);
    p.x = c.stash_values + 3 * s.width;  // ctx
    p.dy = c.dy;
    p.dx = g.dctx;
    p.g[1] = c.g[3] + c.col0;
    mesh_backward(p);
    attention_core_backward(c, s, g, g.dqkv);
    C in = projection(c, s, 0);
    in.x = c.x;
    in.dy = g.dqkv;
    in.dx = c.dx;
    mesh_backward(in);
  }

  static double scale() { return 1.0 / std::sqrt(double(head_dim)); }
  // Rotary positions on the head-major q and k at `qk` (k follows q): each item is one
  // (sequence, head), its rows at positions 0 .. Seq−1.
  template <class C>
  static void rotate(C& c, const auto& s, typename C::value_type* qk, bool inverse) {
    if constexpr (RopeBase > 0)
      rotary_embedding(c.q, 2 * s.items, std::size_t(Seq), std::size_t(head_dim), 0, double(RopeBase), inverse, qk);
  }
  // This device's share: its heads, sequences and the sizes derived from them.
  struct shapes {
    std::size_t heads, w, seqs, items, width;
  };
  // One flash-attention call over every (sequence, head) item of the share.
  static backend::flash_shape flash(const shapes& s) {
    return {.items = s.items, .q_len = std::size_t(Seq), .k_len = std::size_t(Seq), .dh = std::size_t(head_dim),
            .scale = scale(), .causal = Causal};
  }
  template <class C>
  static shapes local(const C& c) {
    shapes s{};
    s.heads = std::size_t(c.sig == signature::head_parallel ? Heads / c.n : on_mesh(c) ? Heads / c.mesh_q : Heads);
    s.w = s.heads * std::size_t(head_dim);
    s.seqs = c.rows / std::size_t(Seq);
    s.items = s.seqs * s.heads;              // one (sequence, head) per batched GEMM item
    s.width = c.rows * s.w;                  // elements of q, k, v or the context
    return s;
  }

  // ---- 2D/2.5D/3D: the projections as the mode's Linear -----------------------------------
  static constexpr bool mesh_sig(signature g) {
    return g == signature::summa_2d || g == signature::tesseract_2p5d || g == signature::cube_3d;
  }
  template <class C>
  static bool on_mesh(const C& c) {
    return mesh_sig(c.sig);
  }
  // A projection's local dimensions: the QKV's (3 × the features out) or the output's.
  static constexpr local_dims projection_dims(const local_dims& d, long long outs) {
    local_dims p = d;
    p.in_cols = D / d.q;
    p.out_cols = outs * D / d.q;
    return p;
  }
  static constexpr buffer_needs projection_memory(const local_dims& d, long long outs) {
    const local_dims p = projection_dims(d, outs);
    return d.sig == signature::cube_3d ? strata::detail::cube_memory(p) : strata::detail::summa_memory(p);
  }
  // The context of projection `which` (0: QKV, 1: output): its weights, gradients, stash and
  // scratch regions (after the attention's own), and its groups. The planner lists the
  // output projection's collectives after the QKV's; under 3D its input's features lie
  // along the QKV's gather axis, so its gather and reduce-scatter groups are exchanged.
  template <class C>
  static C projection(const C& c, const shapes& s, int which) {
    local_dims d{};
    d.rows = static_cast<long long>(c.rows);
    d.q = c.mesh_q;
    d.sig = c.sig;
    const buffer_needs in = projection_memory(d, 3);
    C p = c;
    p.in_cols = std::size_t(D) / std::size_t(c.mesh_q);
    p.out_cols = (which == 0 ? 3 : 1) * p.in_cols;
    p.w = {c.w[which == 0 ? 0 : 2]};
    p.g = {c.g[which == 0 ? 0 : 2], c.g[which == 0 ? 1 : 3]};
    p.stash_values = c.stash_values + 5 * s.width + (which == 0 ? 0 : in.stash_values);
    p.scratch_values = c.scratch_values + 8 * s.width;
    if (which == 1 && c.sig == signature::cube_3d) p.mesh = {c.mesh[2], c.mesh[1], c.mesh[0]};
    return p;
  }
  template <class C>
  static void mesh_forward(C& p, const typename C::value_type* bias) {
    if (p.sig == signature::cube_3d) strata::detail::cube_forward(p, bias);
    else strata::detail::summa_forward(p, bias);
  }
  template <class C>
  static void mesh_backward(C& p) {
    if (p.sig == signature::cube_3d) strata::detail::cube_backward(p, true);
    else strata::detail::summa_backward(p, true);
  }
};

// GPT's attention: each token attends to itself and the tokens before it; with RopeBase > 0,
// Llama's (rotary positions of that base, no position embedding needed).
template <int D, int Heads, int Seq, int RopeBase = 0>
using CausalSelfAttention = MultiHeadAttention<D, Heads, Seq, true, RopeBase>;

}  // namespace strata::layers
