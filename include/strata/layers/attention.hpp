#pragma once
// MultiHeadAttention<D, Heads, Seq, Causal, RopeBase, KVHeads, Bias, AttnDropout>: self-attention over
// [Seq, D] with a fused QKV projection and an output projection, optionally causal (a token
// attends to itself and the tokens before it: GPT), optionally with rotary positions
// (RopeBase > 0: q and k of each head rotated by their token's position, RoFormer / Llama,
// base 10000 for Llama 2, 500000 for Llama 3), optionally grouped-query (KVHeads < Heads:
// KVHeads key/value heads, each shared by a group of G = Heads/KVHeads query heads, Llama 3 /
// Mistral; KVHeads == 1 is multi-query), optionally without biases (Bias = false: Llama),
// optionally with dropout on the attention probabilities (AttnDropout percent, GPT-2's
// attn_pdrop, Megatron's attention_dropout; training only: see attention_dropout below).
// Under Split<N> whole key/value groups are divided among devices (Megatron): the QKV
// projection column-parallel, the output projection row-parallel, so its output is a
// partial sum the planner reduces once.
//
// Parameters, dh = D/Heads: w_qkv [D, (Heads + 2·KVHeads)·dh] whose columns are, kv group
// after kv group, that group's G query heads (dh columns each, in head order), then its k,
// then its v (so a contiguous cut of the columns is a set of whole groups; with KVHeads ==
// Heads this is head after head, q k v), b_qkv alike, w_out [D, D] whose rows follow the
// heads, b_out [D]; without biases w_qkv and w_out only.
//
// Under 2D/2.5D/3D tensor parallelism the kv groups are divided over the mesh columns and
// the sequences over the mesh rows: both projections run as the mode's Linear on S(0,-1)
// blocks (layers/linear_mesh.hpp), the attention itself on the device's heads and rows.
// b_out is whole on every device; each adds (and takes the gradient of) its feature slice.
//
// The attention itself is flash attention (backend/attention.hpp): no Seq × Seq matrix is
// ever formed, and the stash keeps per token q, k, v (k and v at KVHeads width), the
// context and one log-sum-exp per query head, so activation memory is linear in Seq.
//
// Attention dropout drops each probability p_ij of the softmax (not its scores: lse stays
// the undropped one) inside the flash kernels, at coordinates that do not depend on the
// plan (core/kernel_args.hpp's flash_dropout): site the layer's index, sample the sequence's
// global index (sample0 and row0), position the query's, feature (global query head)·Seq +
// key position — the global head being this device's first (its heads under a head split,
// its feature block on a mesh) plus the local one, a grouped query head's own. So every
// plan drops what one device drops; the backward recomputes the mask, nothing is kept.
// Rule [attention-dropout].
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "strata/core/rules.hpp"
#include "strata/layers/context_exchange.hpp"
#include "strata/layers/context_ring.hpp"
#include "strata/layers/layer.hpp"
#include "strata/layers/linear_mesh.hpp"

namespace strata::layers {

template <int D, int Heads, int Seq, bool Causal = false, int RopeBase = 0, int KVHeads = Heads, bool Bias = true,
          int AttnDropout = 0>
struct MultiHeadAttention {
  static_assert(rule::layer_dim_positive<D, Heads>::value && rule::layer_dim_positive<Seq, Seq>::value);
  static_assert(rule::attention_heads_divide_dim<D, Heads>::value);
  static_assert(rule::attention_kv_heads_divide_heads<Heads, KVHeads>::value);
  static_assert(rule::rope_head_dim_even<(Heads > 0 ? D / Heads : 0), RopeBase>::value);
  static_assert(rule::attention_dropout_valid<AttnDropout>::value);
  static constexpr std::string_view name = Causal ? "CausalSelfAttention" : "MultiHeadAttention";
  static constexpr layer_role role = layer_role::attention;
  static constexpr int features = D;
  static constexpr int heads = Heads;
  static constexpr int kv_heads = KVHeads;
  static constexpr int group = KVHeads > 0 ? Heads / KVHeads : 1;  // query heads per key/value head
  static constexpr int seq = Seq;
  static constexpr bool causal = Causal;
  static constexpr bool has_bias = Bias;
  static constexpr int rope_base = RopeBase;  // 0: no rotary positions
  static constexpr double attention_dropout = AttnDropout / 100.0;  // the probabilities' dropout rate (training)
  static constexpr int head_dim = Heads > 0 ? D / Heads : 0;
  static constexpr int qkv_features = (Heads + 2 * KVHeads) * head_dim;  // w_qkv's columns
  static constexpr int split_extent = Heads;
  static constexpr shape_t in_shape = shape_v<Seq, D>;
  static constexpr shape_t out_shape(shape_t in) { return in; }
  static constexpr auto params = [] {
    if constexpr (Bias)
      return std::array<param_t, 4>{{{"w_qkv", shape_v<D, qkv_features>, param_role::weight, 1},
                                     {"b_qkv", shape_v<qkv_features>, param_role::bias, 0},
                                     {"w_out", shape_v<D, D>, param_role::weight, 0},
                                     {"b_out", shape_v<D>, param_role::replicated, -1}}};
    else
      return std::array<param_t, 2>{{{"w_qkv", shape_v<D, qkv_features>, param_role::weight, 1},
                                     {"w_out", shape_v<D, D>, param_role::weight, 0}}};
  }();
  static constexpr long long forward_flops(shape_t) {
    const long long s = Seq, d = D;
    return 2 * s * d * qkv_features + 4 * s * s * d + 2 * s * d * d;
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
    // QKV on its outputs, the out-projection on its inputs; b_out whole
    if constexpr (Bias) c.param_axis = {1, 0, 0, -1, -1, -1};
    else c.param_axis = {1, 0, -1, -1, -1, -1};
    if (Heads % q.n != 0) c.violate(rule_id::split_heads, Heads);
    if (KVHeads % q.n != 0) c.violate(rule_id::split_kv_heads, KVHeads);  // a device holds whole kv groups
    return c;
  }
  // Context<N>: each device holds two pieces of Seq/2N positions of its sequences; the keys
  // and values of the whole sequence are gathered from the part (forward, and again in the
  // backward), and their gradients, summed over the devices' queries, reduce-scattered back
  // (Megatron's all-gather context parallelism, load-balanced). Counted as the whole k and v
  // of the micro-batch, in one call per piece.
  // ContextAllToAll (DeepSpeed-Ulysses): q, k and v trade the sequence split for a head split
  // by one all-to-all, the context trades back by another; the backward runs the two duals.
  // ContextRing: each device's k and v (both pieces) sent on N − 1 times forward, and again
  // in the backward, and their gradients N times (layers/context_ring.hpp).
  // Under Context<N, Split<T>> each device exchanges its own heads' (1/T of them), with the
  // N devices of its tensor index.
  static constexpr shard_choice context_shard(const shard_query& q) {
    shard_choice c;
    const int t = q.tensor > 0 ? q.tensor : 1;
    const long long kv_heads = KVHeads / t, heads = Heads / t, qkv_local = qkv_features / t;
    if (q.exchange == context_mode::ring) {
      const long long block = q.n > 0 ? q.micro_batch * Seq / q.n * 2LL * kv_heads * head_dim : 0;
      c.add(collective::send_recv, group_axis::context, pass::forward, block, q.n - 1);
      c.add(collective::send_recv, group_axis::context, pass::backward, block, q.n - 1);
      c.add(collective::send_recv, group_axis::context, pass::backward, block, q.n);
      return c;
    }
    if (q.exchange == context_mode::all_to_all) {
      if (heads % q.n != 0) c.violate(rule_id::context_heads, int(heads));
      if (kv_heads % q.n != 0) c.violate(rule_id::context_heads, int(kv_heads));
      const long long tokens = q.n > 0 ? q.micro_batch * Seq / q.n : 0;  // this device's
      const long long qkv = tokens * qkv_local, out = tokens * D / t;
      c.add(collective::all_to_all, group_axis::context, pass::forward, qkv);
      c.add(collective::all_to_all, group_axis::context, pass::forward, out);
      c.add(collective::all_to_all, group_axis::context, pass::backward, out);
      c.add(collective::all_to_all, group_axis::context, pass::backward, qkv);
      return c;
    }
    const long long kv = q.micro_batch * Seq * 2LL * kv_heads * head_dim;
    c.add(collective::all_gather, group_axis::context, pass::forward, kv / 2, 2);
    c.add(collective::all_gather, group_axis::context, pass::backward, kv / 2, 2);
    c.add(collective::reduce_scatter, group_axis::context, pass::backward, kv / 2, 2);
    return c;
  }
  // 2D/2.5D/3D: kv groups divided over the mesh columns (whole groups per feature block); the
  // QKV projection (w_qkv, b_qkv), then the output projection (w_out, b_out) as the mode's Linear.
  static constexpr mesh_choice mesh_shard(const mesh_query& q) {
    mesh_choice c;
    c.sig = q.linear;
    if (Heads % q.q != 0) c.violate(rule_id::split_heads, Heads);
    if (KVHeads % q.q != 0) c.violate(rule_id::split_kv_heads, KVHeads);
    c.project(D, qkv_features);
    c.project(D, D);
    if constexpr (Bias) c.param_projection = {0, 0, 1, 1, -1, -1};
    else c.param_projection = {0, 1, -1, -1, -1, -1};
    return c;
  }
  // The cost model's GEMMs (one device, 1D): the two projections over this device's heads,
  // and the attention core of its sequences × heads.
  static constexpr call_gemms gemms(const local_dims& d) {
    const double split = d.sig == signature::head_parallel ? d.n : 1;
    const double rows = static_cast<double>(d.rows), dm = D, dh = head_dim;
    call_gemms g;
    g.add({1, rows, qkv_features / split, dm, true});  // QKV projection
    g.add({1, rows, dm, dm / split, true});            // output projection
    g.scores = {rows / Seq * (Heads / split), static_cast<double>(Seq), dh};
    return g;
  }

  // Kept: x (for dW_qkv); stash: this device's heads' q, k, v (k and v at KVHeads width) and
  // context (head-major), the context as token rows (for dW_out), and each (token, query
  // head)'s log-sum-exp (a statistic). Scratch: the QKV rows (forward), and the gradients
  // (backward): all linear in the tokens. Context<N>: the whole sequence's k and v after those,
  // four times (the gathered blocks, k and v in head-major order, and their gradients from
  // each of the device's two pieces);
  // with ContextAllToAll three blocks of q, k and v instead (sent, received, rearranged);
  // with ContextRing the ring's few blocks of the device's own size (context_ring.hpp).
  // 2D/2.5D/3D: each projection's own stash after those, and the larger of their scratch
  // after the attention's.
  static constexpr buffer_needs memory(const local_dims& d) {
    const long long split = d.sig == signature::head_parallel ? d.n : d.q > 0 ? d.q : 1;
    const long long rows = d.rows, qw = rows * D / split, kvw = rows * KVHeads * head_dim / split;
    buffer_needs b{.keep_input = true, .stash_values = 3 * qw + 2 * kvw, .stash_stats = rows * (Heads / split),
                   .scratch_values = 4 * qw + 4 * kvw, .weight_pass = d.q == 0,
                   .weight_keep = d.q == 0 ? qw + 2 * kvw : 0};
    if (d.context > 1 && d.exchange == context_mode::all_to_all) b.scratch_values += 3 * (qw + 2 * kvw);
    else if (d.context > 1 && d.exchange == context_mode::ring) {
      b.scratch_values += strata::detail::ring_scratch_values(qw / 2, kvw / 2);
      b.scratch_stats = strata::detail::ring_scratch_stats(rows / 2 * (Heads / split));
    } else if (d.context > 1)  // the gathered blocks, whole k and v, and their gradients per piece
      b.scratch_values += (2 + context_segments(d.context, d.exchange)) * 2 * kvw * d.context;
    if (d.q > 0) {
      const buffer_needs in = projection_memory(d, qkv_features), out = projection_memory(d, D);
      b.stash_values += in.stash_values + out.stash_values;
      b.scratch_values += in.scratch_values > out.scratch_values ? in.scratch_values : out.scratch_values;
      b.scratch_stats = std::max({b.scratch_stats, in.scratch_stats, out.scratch_stats});
    }
    return b;
  }

  template <class C>
  static void forward(C& c) {
    using T = typename C::value_type;
    using S = gemm_scalar_t<T>;
    const shapes s = local(c);
    T* q_h = c.stash_values;  // [q_h | k_h | v_h | ctx rows | ctx_h], lse in the stats (q_h .. v_h, ctx_h
    T* ctx = q_h + s.heads_size;  // and lse piece by piece)
    T* ctx_h = ctx + s.qw;
    T* qkv = c.scratch_values;
    if (on_mesh(c)) {
      C p = projection(c, s, 0);
      p.x = c.x;
      p.y = qkv;
      mesh_forward(p, bias(c, b_qkv));
    } else {
      gemm_bias_act(c.q, backend::trans::N, backend::trans::N, c.rows, s.qkv_w, std::size_t(D), S(1), c.x,
                    std::size_t(D), c.w[0], s.qkv_w, S(0), qkv, s.qkv_w, bias(c, b_qkv),
                    backend::activation::none, static_cast<T*>(nullptr));
    }
    // per kv group its G query heads, k and v: head-major [G + 2][seqs, kv heads, Seq, dh]
    const std::size_t dh = head_dim;
    if (s.swaps) {  // ContextAllToAll: the device's kv groups of whole sequences, in the stash
      T* own = context_blocks(c, s) + 2 * s.heads_size;
      heads_from_rows(c.q, s.seqs, s.len, s.kv_heads, std::size_t(group + 2), dh, qkv, own);
      detail::to_whole_sequences(c, static_cast<const T*>(own), std::size_t(group + 2) * s.seqs, s.core_kv_heads, s.len,
                                 dh, context_blocks(c, s), context_blocks(c, s) + s.heads_size, q_h);
    } else {
      for (std::size_t h = 0; h < s.pieces; ++h)
        heads_from_rows(c.q, s.seqs, s.len, s.kv_heads, std::size_t(group + 2), dh, qkv + h * s.piece_rows * s.qkv_w,
                        q_h + h * s.piece_heads);
    }
    for (std::size_t h = 0; h < s.pieces; ++h)  // q and k at their tokens' positions (the stash keeps them rotated)
      rotate(c, s, q_h + h * s.piece_heads, false, h);
    if (s.ring) {
      strata::detail::ring_attention_forward(c, ring_of(c, s), context_blocks(c, s), c.scratch_stats,
                                             [&](int h) { return flash(c, s, std::size_t(h)); });
    } else {
      const T* kv = s.chunks > 1 && !s.swaps ? gather_kv(c, s) : q_h + s.qw;  // [k | v] of the whole sequences
      const std::size_t kv_size = s.kv_items * std::size_t(Seq) * dh;
      for (std::size_t h = 0; h < s.pieces; ++h)
        flash_attention_forward(c.q, flash(c, s, h), static_cast<const T*>(q_h + h * s.piece_heads), kv,
                                kv + kv_size, ctx_h + h * s.piece_q, c.stash_stats + h * s.piece_lse);
    }
    const T* own_ctx = ctx_h;
    if (s.swaps) {  // the context back at this device's positions, every head
      T* own = context_blocks(c, s) + 2 * s.heads_size;
      detail::to_own_positions(c, static_cast<const T*>(ctx_h), std::size_t(group) * s.seqs, s.core_kv_heads, s.len, dh,
                               context_blocks(c, s), context_blocks(c, s) + s.heads_size, own);
      own_ctx = own;
    }
    for (std::size_t h = 0; h < s.pieces; ++h)
      rows_from_heads(c.q, s.seqs, s.len, s.kv_heads, std::size_t(group), dh, own_ctx + h * s.piece_q,
                      ctx + h * s.piece_rows * s.w);
    const T* b_o = bias(c, b_out);
    if (on_mesh(c)) {
      C p = projection(c, s, 1);
      p.x = ctx;
      p.y = c.y;
      mesh_forward(p, b_o ? b_o + c.col0 : nullptr);
      return;
    }
    // the output projection; a head-parallel output is a partial sum: its bias is added once
    const T* b_once = c.sig != signature::head_parallel || c.index == 0 ? b_o : nullptr;
    gemm_bias_act(c.q, backend::trans::N, backend::trans::N, c.rows, std::size_t(D), s.w, S(1), ctx, s.w,
                  c.w[w_out], std::size_t(D), S(0), c.y, std::size_t(D), b_once, backend::activation::none,
                  static_cast<T*>(nullptr));
  }

  template <class C>
  static void backward(C& c) {
    if (on_mesh(c)) return backward_on_mesh(c);
    const auto dqkv = grads<typename C::value_type>(c.scratch_values, local(c)).dqkv;
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
  // The parameters' places in c.w / c.g (the biases absent without Bias).
  static constexpr int b_qkv = 1, w_out = Bias ? 2 : 1, b_out = 3;
  template <class C>
  static const typename C::value_type* bias(const C& c, int i) {
    if constexpr (Bias) return c.w[static_cast<std::size_t>(i)];
    else return nullptr;
  }

  // This device's share: its heads and kv heads, sequences, and the sizes derived from them.
  struct shapes {
    std::size_t heads, kv_heads, w, qkv_w, seqs, items, kv_items;
    std::size_t len, chunks;          // positions per sequence piece here; Context<N>: N chunks, else 1
    // ContextAllGather, ContextRing: two pieces of every sequence ([piece][sequence] rows, exec/context.hpp), the
    // attention core called per piece; the sizes below are the call's, piece_* one piece's
    std::size_t pieces, piece_rows, piece_heads, piece_q, piece_lse;
    // The attention core's view: its heads and kv heads per sequence (ContextAllToAll: a group of
    // them, whole sequences), its query rows per item and their first position.
    std::size_t core_heads, core_kv_heads, q_len;
    bool swaps;  // ContextAllToAll
    bool ring;   // ContextRing
    std::size_t qw, kvw, heads_size;  // elements of q (or the context), of k (or v), of q k v
  };
  // The backward's scratch: [dctx | dctx_h | dq_h dk_h dv_h | dqkv rows].
  template <class T>
  struct grads {
    T *dctx, *dctx_h, *dq_h, *dqkv;
    grads(T* base, const shapes& s)
        : dctx(base), dctx_h(base + s.qw), dq_h(base + 2 * s.qw), dqkv(base + 2 * s.qw + s.heads_size) {}
  };
  // dctx = dy W_outᵀ, the attention's backward, dqkv (into `dqkv`), dx = dqkv W_qkvᵀ (a
  // partial sum over heads).
  template <class C>
  static void backward_input(C& c, typename C::value_type* dqkv) {
    using S = gemm_scalar_t<typename C::value_type>;
    const shapes s = local(c);
    const grads<typename C::value_type> g(c.scratch_values, s);
    const auto N = backend::trans::N, Tr = backend::trans::T;
    gemm(c.q, N, Tr, c.rows, s.w, std::size_t(D), S(1), c.dy, std::size_t(D), c.w[w_out], std::size_t(D), S(0),
         g.dctx, s.w);
    attention_core_backward(c, s, g, dqkv);
    if (c.dx)
      gemm(c.q, N, Tr, c.rows, std::size_t(D), s.qkv_w, S(1), dqkv, s.qkv_w, c.w[0], s.qkv_w, S(0), c.dx,
           std::size_t(D));
  }
  // dW_out += ctxᵀ dy, db_out += Σ dy, dW_qkv += xᵀ dqkv, db_qkv += Σ dqkv.
  template <class C>
  static void backward_params(C& c, const typename C::value_type* dqkv) {
    using T = typename C::value_type;
    using S = gemm_scalar_t<T>;
    const shapes s = local(c);
    const T* ctx = c.stash_values + s.heads_size;
    const auto N = backend::trans::N, Tr = backend::trans::T;
    gemm(c.q, Tr, N, s.w, std::size_t(D), c.rows, S(1), ctx, s.w, c.dy, std::size_t(D), S(1), c.g[w_out],
         std::size_t(D));
    if constexpr (Bias) bias_grad(c.q, c.rows, std::size_t(D), c.dy, c.g[b_out], true);
    gemm(c.q, Tr, N, std::size_t(D), s.qkv_w, c.rows, S(1), c.x, std::size_t(D), dqkv, s.qkv_w, S(1), c.g[0],
         s.qkv_w);
    if constexpr (Bias) bias_grad(c.q, c.rows, s.qkv_w, dqkv, c.g[b_qkv], true);
  }
  // From g.dctx (token rows) and the stash [q_h | k_h | v_h | ctx | ctx_h] with the
  // log-sum-exps: flash attention's backward (each tile's probabilities recomputed; a kv
  // head's dk, dv summed over its group), and dq, dk, dv as the QKV rows' gradient into `dqkv`.
  template <class C, class G>
  static void attention_core_backward(C& c, const shapes& s, const G& g, typename C::value_type* dqkv) {
    using T = typename C::value_type;
    const std::size_t dh = head_dim;
    const T* q_h = c.stash_values;
    T* blocks = context_blocks(c, s);
    const T* dctx_h = g.dctx_h;
    for (std::size_t h = 0; h < s.pieces; ++h)
      heads_from_rows(c.q, s.seqs, s.len, s.kv_heads, std::size_t(group), dh, g.dctx + h * s.piece_rows * s.w,
                      g.dctx_h + h * s.piece_q);
    if (s.swaps) {  // ContextAllToAll: the context's gradient for the device's kv groups, whole sequences
      detail::to_whole_sequences(c, static_cast<const T*>(g.dctx_h), std::size_t(group) * s.seqs, s.core_kv_heads,
                                 s.len, dh, blocks, blocks + s.heads_size, blocks + 2 * s.heads_size);
      dctx_h = blocks + 2 * s.heads_size;
    }
    const T* ctx_h = q_h + s.heads_size + s.qw;
    if (s.ring) {  // dq, and each piece's dk and dv after it, home from the ring
      strata::detail::ring_attention_backward(
          c, ring_of(c, s), {dctx_h, dctx_h + s.piece_q}, {g.dq_h, g.dq_h + s.piece_heads},
          {g.dq_h + s.piece_q, g.dq_h + s.piece_heads + s.piece_q}, blocks,
          [&](int h) { return flash(c, s, std::size_t(h)); });
    } else {
      // ContextAllGather: the whole sequences' k and v again, and their gradients in the last
      // blocks (one per piece: flash writes dk and dv, the pieces' are summed)
      const bool gathers = s.chunks > 1 && !s.swaps;
      const std::size_t kv_size = s.kv_items * std::size_t(Seq) * dh;
      const T* kv = gathers ? gather_kv(c, s) : q_h + s.qw;
      T* dkv = gathers ? blocks + 4 * s.kvw * s.chunks : g.dq_h + s.qw;
      for (std::size_t h = 0; h < s.pieces; ++h) {
        T* dkv_h = dkv + h * 2 * kv_size;
        flash_attention_backward(c.q, flash(c, s, h), q_h + h * s.piece_heads, kv, kv + kv_size,
                                 ctx_h + h * s.piece_q, dctx_h + h * s.piece_q,
                                 static_cast<const typename C::stat_type*>(c.stash_stats) + h * s.piece_lse,
                                 g.dq_h + h * s.piece_heads, dkv_h, dkv_h + kv_size);
      }
      if (s.pieces > 1) axpy(c.q, 2 * kv_size, 1.0, static_cast<const T*>(dkv + 2 * kv_size), dkv);
      if (gathers)  // each device's pieces of the gradients (each [dk | dv] after its dq), summed over every device's queries
        detail::scatter_balanced(c, dkv, 2 * s.kv_items, s.len, dh, blocks, g.dq_h + s.piece_q,
                                 g.dq_h + s.piece_heads + s.piece_q);
    }
    for (std::size_t h = 0; h < s.pieces; ++h)  // back through the rotation: its transpose
      rotate(c, s, g.dq_h + h * s.piece_heads, true, h);
    const T* own = g.dq_h;
    if (s.swaps) {  // dq, dk and dv back at this device's positions, every head
      detail::to_own_positions(c, static_cast<const T*>(g.dq_h), std::size_t(group + 2) * s.seqs, s.core_kv_heads,
                               s.len, dh, blocks, blocks + s.heads_size, blocks + 2 * s.heads_size);
      own = blocks + 2 * s.heads_size;
    }
    for (std::size_t h = 0; h < s.pieces; ++h)
      rows_from_heads(c.q, s.seqs, s.len, s.kv_heads, std::size_t(group + 2), dh, own + h * s.piece_heads,
                      dqkv + h * s.piece_rows * s.qkv_w);
  }
  // 2D/2.5D/3D: both projections as the mode's Linear, whole.
  template <class C>
  static void backward_on_mesh(C& c) {
    const shapes s = local(c);
    const grads<typename C::value_type> g(c.scratch_values, s);
    C p = projection(c, s, 1);
    p.x = c.stash_values + s.heads_size;  // ctx
    p.dy = c.dy;
    p.dx = g.dctx;
    if constexpr (Bias) p.g[1] = c.g[b_out] + c.col0;
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
  // (sequence, head) or (sequence, kv head), its rows at positions q0 .. q0 + q_len − 1
  // (0 .. Seq − 1 unless ContextAllGather or ContextRing split the sequence).
  template <class C>
  static void rotate(C& c, const shapes& s, typename C::value_type* qk, bool inverse, std::size_t piece) {
    if constexpr (RopeBase > 0)
      rotary_embedding(c.q, s.items + s.kv_items, s.q_len, std::size_t(head_dim), q0(c, s, piece), double(RopeBase),
                       inverse, qk);
  }
  // The first query position of a piece (0 when the core attends whole sequences).
  template <class C>
  static long long q0(const C& c, const shapes& s, std::size_t piece) {
    return s.swaps ? 0 : static_cast<long long>(c.piece_pos0(int(piece)));
  }
  // Context<N>: the exchange's blocks after the attention's scratch (memory() sizes them).
  // All-gather: three of the whole sequences' k and v — the part's gathered chunks (then the
  // gradients' chunks to reduce-scatter), k and v in head-major order, and their gradients.
  // All-to-all: three of q, k and v — sent, received, and the rearranged side. Ring: the
  // ring's own (context_ring.hpp's ring_scratch_values).
  template <class C>
  static typename C::value_type* context_blocks(const C& c, const shapes& s) {
    return c.scratch_values + 4 * s.qw + 4 * s.kvw;
  }
  // The part's [k | v] pieces (each device's stash, two pieces) gathered, then laid out as
  // one head-major [k | v] of whole sequences: piece j of item i at rows j·len of item i.
  template <class C>
  static const typename C::value_type* gather_kv(C& c, const shapes& s) {
    using T = typename C::value_type;
    auto* staging = context_blocks(c, s);
    auto* whole = staging + 2 * s.kvw * s.chunks;
    const T* mine = c.stash_values + s.piece_q;  // the first piece's [k | v], after its q; the second's
    detail::gather_balanced(c, mine, mine + s.piece_heads, 2 * s.kv_items, s.len, std::size_t(head_dim), staging,
                            whole);
    return whole;
  }
  // ContextRing: the device's two pieces of q, k, v (the stash), of the context and of the
  // log-sum-exps, for layers/context_ring.hpp.
  template <class C>
  static auto ring_of(const C& c, const shapes& s) {
    return strata::detail::ring_share_of(c.stash_values, c.stash_values + s.heads_size + s.qw, c.stash_stats,
                                         s.piece_heads, s.piece_q, s.kvw / 2, s.piece_lse, std::size_t(head_dim), s.len);
  }
  // One flash-attention call over every (sequence, head) item of the share; query item
  // p·kv_items + k (group member p) reads kv item k, the order heads_from_rows gives. In
  // training with AttnDropout, the dropout at global coordinates: sequence 0 is the sample of
  // the share's first row, the first head the share's (core_share).
  template <class C>
  static backend::flash_shape flash(const C& c, const shapes& s, std::size_t piece) {
    backend::flash_shape f{.items = s.items, .group = std::size_t(group), .q_len = s.q_len,
                           .k_len = std::size_t(Seq), .dh = std::size_t(head_dim), .q0 = q0(c, s, piece),
                           .scale = scale(), .causal = Causal};
    if constexpr (AttnDropout > 0) {
      if (c.training) {
        const core_origin o = core_share(c, s);
        f.drop = {.key = c.step_key, .site = c.site, .sample0 = c.sample0 + o.row0 / c.sample_rows,
                  .head0 = o.head0, .heads = s.core_kv_heads, .stride = std::uint64_t(Seq),
                  .threshold = dropout_threshold(std::uint64_t(AttnDropout), 100),
                  .scale = 100.0 / double(100 - AttnDropout)};
      }
    }
    return f;
  }
  // The micro-batch row and the global query head where the attention core's share starts.
  // 1D: the call's rows, and under a head split this device's heads. 2D/2.5D: the input's
  // S(0,-1) block (row0, col0). 3D: the QKV projection turns the layout (plan/sharding.hpp's
  // block_of: device (i, j, k), index (k·q + i)·q + j, holds rows i·q + k and features j, or
  // turned rows i·q + j and features k), so the core holds the input's block turned.
  struct core_origin {
    std::size_t row0, head0;
  };
  template <class C>
  static core_origin core_share(const C& c, const shapes& s) {
    // Ulysses: a head group of the device's heads (under a head split, its tensor index's)
    const std::size_t group0 = s.swaps ? std::size_t(c.context_index) * s.core_heads : 0;
    if (c.sig == signature::head_parallel) return {c.row0, std::size_t(c.index) * s.heads + group0};
    if (!on_mesh(c)) return {c.row0, group0};
    const std::size_t q = std::size_t(c.mesh_q), in = c.col0 / (std::size_t(D) / q);  // the input's feature block
    if (c.sig != signature::cube_3d) return {c.row0, in * s.heads};
    const std::size_t d = std::size_t(c.index), i = d / q % q, j = d % q, k = d / (q * q);
    return {(i * q + in) * c.rows, (in == j ? k : j) * s.heads};  // features on j: the core's on k, and back
  }
  template <class C>
  static shapes local(const C& c) {
    const std::size_t split = c.sig == signature::head_parallel ? c.n : on_mesh(c) ? std::size_t(c.mesh_q) : 1;
    shapes s{};
    s.heads = std::size_t(Heads) / split;
    s.kv_heads = std::size_t(KVHeads) / split;
    s.w = s.heads * std::size_t(head_dim);
    s.qkv_w = s.w + 2 * s.kv_heads * std::size_t(head_dim);
    s.chunks = std::size_t(c.context);  // Context<N>: N chunks of every sequence
    s.pieces = std::size_t(c.pieces());
    s.len = std::size_t(Seq) / (s.chunks * s.pieces);
    s.piece_rows = c.rows / s.pieces;
    s.seqs = s.piece_rows / s.len;
    s.swaps = s.chunks > 1 && c.exchange == context_mode::all_to_all;
    s.ring = s.chunks > 1 && c.exchange == context_mode::ring;
    s.core_heads = s.swaps ? s.heads / s.chunks : s.heads;
    s.core_kv_heads = s.swaps ? s.kv_heads / s.chunks : s.kv_heads;
    s.q_len = s.swaps ? std::size_t(Seq) : s.len;
    s.items = s.seqs * s.core_heads;  // one (sequence, head) per flash item, per piece
    s.kv_items = s.seqs * s.core_kv_heads;
    s.qw = c.rows * s.w;
    s.kvw = c.rows * s.kv_heads * std::size_t(head_dim);
    s.heads_size = s.qw + 2 * s.kvw;
    s.piece_q = s.qw / s.pieces;
    s.piece_heads = s.heads_size / s.pieces;
    s.piece_lse = s.items * s.q_len;
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
  // A projection's local dimensions: D features in, `outs` out (the QKV's or the output's).
  static constexpr local_dims projection_dims(const local_dims& d, long long outs) {
    local_dims p = d;
    p.in_cols = D / d.q;
    p.out_cols = outs / d.q;
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
    const buffer_needs in = projection_memory(d, qkv_features);
    C p = c;
    p.in_cols = std::size_t(D) / std::size_t(c.mesh_q);
    p.out_cols = std::size_t(which == 0 ? qkv_features : D) / std::size_t(c.mesh_q);
    p.w = {c.w[which == 0 ? 0 : w_out]};
    p.g = {c.g[which == 0 ? 0 : w_out]};
    if constexpr (Bias) p.g[1] = c.g[which == 0 ? b_qkv : b_out];
    p.stash_values = c.stash_values + s.heads_size + 2 * s.qw + (which == 0 ? 0 : in.stash_values);
    p.scratch_values = c.scratch_values + 2 * s.qw + 2 * s.heads_size;
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
    if (p.sig == signature::cube_3d) strata::detail::cube_backward(p, Bias);
    else strata::detail::summa_backward(p, Bias);
  }
};

// GPT's attention: each token attends to itself and the tokens before it; with RopeBase > 0,
// Llama 2's (rotary positions of that base, no position embedding needed).
template <int D, int Heads, int Seq, int RopeBase = 0, int AttnDropout = 0>
using CausalSelfAttention = MultiHeadAttention<D, Heads, Seq, true, RopeBase, Heads, true, AttnDropout>;

// Llama 3's / Mistral's attention: causal, rotary positions, KVHeads key/value heads shared
// by groups of Heads/KVHeads query heads (KVHeads == Heads: Llama 2's; 1: multi-query), no
// biases. Llama 3 uses RopeBase 500000.
template <int D, int Heads, int KVHeads, int Seq, int RopeBase = 10000, int AttnDropout = 0>
using LlamaAttention = MultiHeadAttention<D, Heads, Seq, true, RopeBase, KVHeads, false, AttnDropout>;

}  // namespace strata::layers
