#pragma once
// MoE<Experts, D, Hidden, TopK = 1, CapacityPercent = 125, AuxPercentMille = 10>: a gated
// mixture of two-layer expert MLPs applied per token (Switch Transformer, GShard).
//
// Per token x (a row of D):
//   router      p = softmax(x · gate) over the experts (gate [D, Experts], no bias);
//   selection   the TopK largest p_e, ties to the lower expert index;
//   experts     expert_e(x) = GeLU(x · w_in[e]) · w_out[e] (w_in [E, D, Hidden], w_out
//               [E, Hidden, D], no biases; GeLU's tanh form, math::act_forward);
//   output      y = Σ over the selected, kept experts of p_e · expert_e(x): the raw router
//               probabilities, not renormalised over the TopK (Switch's form for TopK 1).
// Capacity: each expert takes at most C = ceil(CapacityPercent/100 · tokens · TopK / E)
// tokens of a micro-batch on a device (its local rows). Choices are assigned first
// choices first, then second choices, each in token order; a choice whose expert is full
// is dropped: it adds nothing to y (a residual around the layer carries the token on).
// Deterministic, the same on every backend (core/moe_math.hpp).
// Load balancing (Switch): aux = alpha · E · Σ_e f_e · P_e with alpha = AuxPercentMille
// / 1000, f_e = (choices that picked e, before dropping) / (tokens · TopK) — constants —
// and P_e = the mean of p_e over the tokens; its gradient reaches the gate through P_e.
// It is a loss of the micro-batch: the trainer adds it to the step's loss (reported loss =
// mean cross-entropy + aux averaged over micro-batches; evaluate() reports the
// cross-entropy alone) and scales its gradient as the micro-batch's share of the step
// (exec/context.hpp aux_loss_io).
//
// Execution: on one device, under Replicate<N> (data parallel; N > 1 cuts the
// micro-batch's tokens over the part, whose per-expert counts and probability sums are
// all-reduced so that f and P are the micro-batch's; capacity stays per device) and under
// Split<N> (expert parallel, Experts % N == 0): device i holds experts [i·E/N, (i+1)·E/N)
// and the micro-batch's rows [i·rows, (i+1)·rows); the gate is replicated. Each device
// routes its tokens, the part all-gathers per-device, per-rank choice counts and
// probability sums ((TopK + 1)·E statistics each), from which every device assigns its
// choices the slots one device would give them (capacity of the whole micro-batch, first
// choices first, in the micro-batch's token order) and sums f and P. Dispatch: one
// all-to-all of fixed [E/N, C, D] blocks per peer (a device's tokens in their global
// slots, zeros elsewhere; the owner sums the N blocks); the owner runs its experts and
// returns its [E/N, C, D] outputs to every peer (combine: a second all-to-all). Backward
// mirrors it (the experts' output gradients to the owners, their input gradients back),
// so the result equals one device's.
#include "strata/core/communicator.hpp"
#include "strata/core/moe_math.hpp"
#include "strata/core/rules.hpp"
#include "strata/layers/layer.hpp"

namespace strata::layers {

template <int Experts, int D, int Hidden, int TopK = 1, int CapacityPercent = 125, int AuxPercentMille = 10>
struct MoE {
  static_assert(rule::layer_dim_positive<Experts, D>::value && rule::layer_dim_positive<Hidden, TopK>::value);
  static_assert(rule::moe_topk_within_experts<TopK, Experts>::value);
  static_assert(rule::moe_capacity_valid<CapacityPercent, AuxPercentMille>::value);
  static constexpr std::string_view name = "MoE";
  static constexpr layer_role role = layer_role::moe;
  static constexpr int experts = Experts;
  static constexpr int features = D;
  static constexpr int hidden = Hidden;
  static constexpr int top_k = TopK;
  static constexpr int capacity_percent = CapacityPercent;
  static constexpr double aux_alpha = AuxPercentMille / 1000.0;
  static constexpr int split_extent = Experts;
  static constexpr shape_t in_shape = shape_v<D>;
  static constexpr shape_t out_shape(shape_t in) { return in; }
  static constexpr std::array<param_t, 3> params{
      {{"gate", shape_v<D, Experts>, param_role::replicated, -1},
       {"w_in", shape_t{3, {Experts, D, Hidden, 0}}, param_role::weight, 0},
       {"w_out", shape_t{3, {Experts, Hidden, D, 0}}, param_role::weight, 0}}};
  static constexpr long long tokens(shape_t in) { return in.numel() / D; }
  static constexpr long long forward_flops(shape_t in) {
    return tokens(in) * (2LL * D * Experts + TopK * 4LL * D * Hidden);
  }
  static constexpr long long backward_flops(shape_t in) { return 2 * forward_flops(in); }
  // The load-balancing loss reads per-expert choice counts and probability sums of the
  // whole micro-batch: a data-parallel part sums its devices' shares of these 2·E.
  static constexpr long long aux_loss_stats = 2LL * Experts;
  // U(±1/√fan_in) per matrix: the gate and w_in read D features, w_out Hidden.
  static double init(const init_site& s) { return init_rules::fan_in_uniform(s, s.tensor == 2 ? Hidden : D); }

  static constexpr shard_choice shard(const shard_query& q) {
    shard_choice c;
    c.sig = signature::expert_parallel;
    c.need = c.out = sbp::split_batch;
    c.rows_div = q.n;
    c.flops_div = q.n;
    c.param_axis = {-1, 0, 0, -1, -1, -1};  // experts divided; the gate whole
    if (Experts % q.n != 0) c.violate(rule_id::split_experts, Experts);
    // every device routes an equal share of the micro-batch's tokens
    const long long micro_tokens = q.micro_batch * tokens(q.in);
    if (micro_tokens % q.n != 0) c.violate(rule_id::split_tokens, static_cast<int>(micro_tokens));
    // dispatch and combine, each way: a [E/n, C, D] block to and from every device, C the
    // micro-batch's capacity (the all-to-all passes E · C · D elements from each device)
    const long long slots_all = Experts * capacity(micro_tokens);
    c.add(collective::all_to_all, group_axis::part, pass::forward, slots_all * D, 2);
    c.add(collective::all_to_all, group_axis::part, pass::backward, slots_all * D, 2);
    // routing: every device's per-rank choice counts and probability sums
    c.add(collective::all_gather, group_axis::part, pass::forward, 1LL * q.n * (TopK + 1) * Experts, 1, /*stats=*/true);
    return c;
  }

  // An expert's slots for `rows` local tokens.
  static constexpr long long capacity(long long rows) {
    return math::moe::capacity(rows, Experts, TopK, CapacityPercent);
  }
  // Kept (x for the gathers and the gate's gradient); stash: router probabilities
  // [rows, E], the experts' pre-activations [E·C, Hidden] and outputs [E·C, D]; per-expert
  // choice counts and probability sums (2E stats); choices, slots [rows, K] and each
  // slot's token [E·C] (ids). Scratch: the gathered tokens [E·C, D], the hidden
  // activations [E·C, Hidden], the experts' output gradients [E·C, D] (then their
  // input gradients) and the router logits' gradient [rows, E].
  // Expert parallel (n devices, C the micro-batch's capacity, E_l = E/n local experts):
  // stash probabilities [rows, E], the local experts' inputs [E_l·C, D] and
  // pre-activations [E_l·C, Hidden], every expert's outputs [E·C, D] (this device's slots
  // filled), 2E stats, ids as above; scratch: the all-to-all's send and receive buffers
  // (2 × [E·C, D]), the local experts' hidden activations [E_l·C, Hidden] and outputs or
  // gradients [E_l·C, D], the router logits' gradient [rows, E]; (n + 1)·(TopK + 1)·E
  // stats for the gathered routing rows.
  static constexpr buffer_needs memory(const local_dims& d) {
    if (d.sig == signature::expert_parallel) {
      const long long cap = capacity(d.rows * d.n), slots = Experts * cap, local = slots / d.n;
      return {.keep_input = true,
              .stash_values = d.rows * Experts + local * (D + Hidden) + slots * D,
              .stash_stats = 2LL * Experts,
              .stash_ids = 2 * d.rows * TopK + slots,
              .scratch_values = 2 * slots * D + local * (Hidden + D) + d.rows * Experts,
              .scratch_stats = (d.n + 1LL) * (TopK + 1) * Experts};
    }
    const long long slots = Experts * capacity(d.rows);
    return {.keep_input = true,
            .stash_values = d.rows * Experts + slots * (Hidden + D),
            .stash_stats = 2LL * Experts,
            .stash_ids = 2 * d.rows * TopK + slots,
            .scratch_values = slots * (2LL * D + Hidden) + d.rows * Experts};
  }

  template <class C>
  static void forward(C& c) {
    if (c.sig == signature::expert_parallel) return forward_ep(c);
    using S = gemm_scalar_t<typename C::value_type>;
    const auto N = backend::trans::N;
    const bufs<C> b(c);
    const std::size_t R = c.rows, E = Experts, cap = b.cap, d = D;
    // router: logits into the probabilities' place, softmax and top-k there
    gemm(c.q, N, N, R, E, d, S(1), c.x, d, c.w[0], E, S(0), b.probs, E);
    moe_route(c.q, R, Experts, TopK, b.probs, b.probs, b.choice, b.stats);
    // f and P are the micro-batch's: a part that cut its tokens sums them
    if (c.sig == signature::data_parallel && c.n > 1) c.part.all_reduce(b.stats, 2 * E, comm::reduce_op::sum);
    moe_assign(c.q, R, Experts, TopK, cap, b.choice, b.slot_of, b.token_of);
    // experts: [E, C, D] → GeLU([E, C, Hidden]) → [E, C, D], one strided batch each
    auto* xe = c.scratch_values;
    auto* hid = xe + b.slots * d;
    moe_gather(c.q, b.slots, d, TopK, b.token_of, c.x, xe);
    experts_forward(c, E, cap, xe, b.h_pre, b.none(), hid, b.ye);
    moe_combine(c.q, R, d, Experts, TopK, cap, b.choice, b.slot_of, b.probs, b.ye, c.y);
    if (c.aux && c.aux->acc)
      moe_aux_accumulate(c.q, Experts, b.stats, math::moe::aux_value_coef(Experts, TopK, b.tokens, aux_alpha),
                         c.aux->rows, c.aux->acc);
  }

  template <class C>
  static void backward(C& c) {
    if (c.sig == signature::expert_parallel) return backward_ep(c);
    using S = gemm_scalar_t<typename C::value_type>;
    const auto N = backend::trans::N, Tr = backend::trans::T;
    const bufs<C> b(c);
    const std::size_t R = c.rows, E = Experts, cap = b.cap, d = D, h = Hidden;
    auto* dye = c.scratch_values;  // [dye, then dxe | xe | hidden, then its gradient | dlogits]
    auto* xe = dye + b.slots * d;
    auto* hid = xe + b.slots * d;
    auto* dlogits = hid + b.slots * h;
    // the combine: into the experts (p · dy) and into the router (dy · expert output)
    moe_dispatch_grad(c.q, b.slots, d, Experts, TopK, cap, b.token_of, b.probs, c.dy, dye);
    const double aux = c.aux ? c.aux->scale * math::moe::aux_grad_coef(Experts, TopK, b.tokens, aux_alpha) : 0.0;
    moe_router_backward(c.q, R, d, Experts, TopK, cap, b.probs, b.choice, b.slot_of, c.dy, b.ye, b.stats, aux,
                        dlogits);
    // the experts (tokens gathered again from the kept x)
    moe_gather(c.q, b.slots, d, TopK, b.token_of, c.x, xe);
    experts_backward(c, E, cap, xe, dye, b.h_pre, b.none(), hid);
    // the gate: dgate += xᵀ dlogits
    gemm(c.q, Tr, N, d, E, R, S(1), c.x, d, dlogits, E, S(1), c.g[0], E);
    if (!c.dx) return;
    // dx = Σ over kept choices of (d hidden W_inᵀ) + dlogits gateᵀ
    gemm_strided_batched(c.q, N, Tr, cap, d, h, S(1), hid, h, cap * h, c.w[1], h, d * h, S(0), dye, d, cap * d, E);
    moe_scatter(c.q, R, d, TopK, cap, b.choice, b.slot_of, dye, c.dx);
    gemm(c.q, N, Tr, R, d, E, S(1), dlogits, E, c.w[0], E, S(1), c.dx, d);
  }

 private:
  // ---- expert parallel (Split<n>) ---------------------------------------------------------
  template <class C>
  static void forward_ep(C& c) {
    using S = gemm_scalar_t<typename C::value_type>;
    const auto N = backend::trans::N;
    const ep_bufs<C> b(c);
    const std::size_t R = c.rows, E = Experts, cap = b.cap, d = D, h = Hidden, El = b.local_experts;
    gemm(c.q, N, N, R, E, d, S(1), c.x, d, c.w[0], E, S(0), b.probs, E);
    moe_route(c.q, R, Experts, TopK, b.probs, b.probs, b.choice, b.stats);
    // slots over the whole micro-batch, from every device's per-rank counts
    moe_route_counts(c.q, R, Experts, TopK, b.choice, b.stats, b.row);
    c.part.all_gather(b.row, b.table, std::size_t(TopK + 1) * E);
    moe_assign_part(c.q, R, Experts, TopK, cap, b.table, c.n, c.index, b.choice, b.slot_of, b.token_of, b.stats);
    // dispatch: this device's tokens in their slots of every expert; the owner sums
    auto* send = c.scratch_values;
    auto* recv = send + b.slots * d;
    auto* hid = recv + b.slots * d;
    auto* yl = hid + b.local * h;
    moe_gather(c.q, b.slots, d, TopK, b.token_of, c.x, send);
    c.part.all_to_all(send, recv, b.local * d);
    sum_blocks(c, recv, b.xe, b.local * d);
    // the local experts
    experts_forward(c, El, cap, b.xe, b.h_pre, b.none(), hid, yl);
    // combine: every device gets the local experts' outputs, lands them at the experts' rows
    for (int p = 0; p < c.n; ++p) copy(c.q, b.local * d, yl, send + std::size_t(p) * b.local * d);
    c.part.all_to_all(send, b.ye, b.local * d);
    moe_combine(c.q, R, d, Experts, TopK, cap, b.choice, b.slot_of, b.probs, b.ye, c.y);
    if (c.aux && c.aux->acc)
      moe_aux_accumulate(c.q, Experts, b.stats, math::moe::aux_value_coef(Experts, TopK, b.tokens, aux_alpha),
                         c.aux->rows, c.aux->acc);
  }

  template <class C>
  static void backward_ep(C& c) {
    using S = gemm_scalar_t<typename C::value_type>;
    const auto N = backend::trans::N, Tr = backend::trans::T;
    const ep_bufs<C> b(c);
    const std::size_t R = c.rows, cap = b.cap, d = D, h = Hidden, El = b.local_experts;
    auto* send = c.scratch_values;
    auto* recv = send + b.slots * d;
    auto* hid = recv + b.slots * d;
    auto* dyl = hid + b.local * h;
    auto* dlogits = dyl + b.local * d;
    // the combine's backward: p · dy into every expert's slots, to the owners
    moe_dispatch_grad(c.q, b.slots, d, Experts, TopK, cap, b.token_of, b.probs, c.dy, send);
    c.part.all_to_all(send, recv, b.local * d);
    sum_blocks(c, recv, dyl, b.local * d);
    const double aux = c.aux ? c.aux->scale * math::moe::aux_grad_coef(Experts, TopK, b.tokens, aux_alpha) : 0.0;
    moe_router_backward(c.q, R, d, Experts, TopK, cap, b.probs, b.choice, b.slot_of, c.dy, b.ye, b.stats, aux,
                        dlogits);
    // the local experts, as on one device
    experts_backward(c, El, cap, b.xe, dyl, b.h_pre, b.none(), hid);
    gemm(c.q, Tr, N, d, Experts, R, S(1), c.x, d, dlogits, Experts, S(1), c.g[0], Experts);
    if (!c.dx) return;
    // the experts' input gradients back to every device, scattered to the tokens
    gemm_strided_batched(c.q, N, Tr, cap, d, h, S(1), hid, h, cap * h, c.w[1], h, d * h, S(0), dyl, d, cap * d, El);
    for (int p = 0; p < c.n; ++p) copy(c.q, b.local * d, dyl, send + std::size_t(p) * b.local * d);
    c.part.all_to_all(send, recv, b.local * d);
    moe_scatter(c.q, R, d, TopK, cap, b.choice, b.slot_of, recv, c.dx);
    gemm(c.q, N, Tr, R, d, Experts, S(1), dlogits, Experts, c.w[0], Experts, S(1), c.dx, d);
  }

  // The experts' MLPs on their [count, cap, D] slots: h_pre = x W_in, hid = GeLU(h_pre),
  // y = hid W_out (one strided batch per GEMM).
  template <class C, class T, class X, class Z>
  static void experts_forward(C& c, std::size_t count, std::size_t cap, const X* xe, T* h_pre, Z none, T* hid, T* y) {
    using S = gemm_scalar_t<typename C::value_type>;
    const auto N = backend::trans::N;
    const std::size_t d = D, h = Hidden;
    gemm_strided_batched(c.q, N, N, cap, h, d, S(1), xe, d, cap * d, c.w[1], h, d * h, S(0), h_pre, h, cap * h, count);
    bias_activation_forward(c.q, backend::activation::gelu, count * cap, h, h_pre, none, none, hid);
    gemm_strided_batched(c.q, N, N, cap, d, h, S(1), hid, h, cap * h, c.w[2], d, h * d, S(0), y, d, cap * d, count);
  }

  // The backward of `count` experts of `cap` slots each (inputs xe, output gradients dy,
  // kept pre-activations h_pre): dW_out[e] += GeLU(h_pre)ᵀ dy, d hidden = dy W_outᵀ ·
  // GeLU'(h_pre) into `hid` (for the input gradients), dW_in[e] += xeᵀ d hidden.
  template <class C, class T, class X, class Z>
  static void experts_backward(C& c, std::size_t count, std::size_t cap, const X* xe, const T* dy, const T* h_pre,
                               Z none, T* hid) {
    using S = gemm_scalar_t<typename C::value_type>;
    const auto N = backend::trans::N, Tr = backend::trans::T;
    const std::size_t d = D, h = Hidden;
    bias_activation_forward(c.q, backend::activation::gelu, count * cap, h, h_pre, none, none, hid);
    for (std::size_t e = 0; e < count; ++e)
      gemm(c.q, Tr, N, h, d, cap, S(1), hid + e * cap * h, h, dy + e * cap * d, d, S(1), c.g[2] + e * h * d, d);
    gemm_strided_batched(c.q, N, Tr, cap, h, d, S(1), dy, d, cap * d, c.w[2], d, h * d, S(0), hid, h, cap * h, count);
    activation_backward(c.q, backend::activation::gelu, count * cap * h, h_pre, hid, hid);
    for (std::size_t e = 0; e < count; ++e)
      gemm(c.q, Tr, N, d, h, cap, S(1), xe + e * cap * d, d, hid + e * cap * h, h, S(1), c.g[1] + e * d * h, h);
  }

  // out = Σ over the part's n blocks of `in` (n × count): each slot is filled by one device.
  template <class C, class T>
  static void sum_blocks(C& c, const T* in, T* out, std::size_t count) {
    copy(c.q, count, in, out);
    for (int p = 1; p < c.n; ++p) add(c.q, count, out, in + std::size_t(p) * count, out);
  }

  template <class C>
  struct ep_bufs {
    using T = typename C::value_type;
    std::size_t cap, slots, local, local_experts;
    double tokens;  // of the micro-batch
    T *probs, *xe, *h_pre, *ye;
    stat_t<T>* stats;
    stat_t<T>* row;    // this device's routing row, (TopK + 1)·E
    stat_t<T>* table;  // the part's rows, n of them
    std::int32_t *choice, *slot_of, *token_of;
    explicit ep_bufs(const C& c)
        : cap(static_cast<std::size_t>(capacity(static_cast<long long>(c.rows) * c.n))),
          slots(cap * Experts),
          local(slots / std::size_t(c.n)),
          local_experts(std::size_t(Experts / c.n)),
          tokens(double(c.rows) * c.n),
          probs(c.stash_values),
          xe(probs + c.rows * Experts),
          h_pre(xe + local * D),
          ye(h_pre + local * Hidden),
          stats(c.stash_stats),
          row(c.scratch_stats),
          table(row + std::size_t(TopK + 1) * Experts),
          choice(c.stash_ids),
          slot_of(choice + c.rows * TopK),
          token_of(slot_of + c.rows * TopK) {}
    static T* none() { return nullptr; }
  };

  // The stash's pieces for this call (memory() above lays them out).
  template <class C>
  struct bufs {
    using T = typename C::value_type;
    std::size_t cap, slots;
    double tokens;  // of the micro-batch: a data-parallel part holds 1/n of them
    T *probs, *h_pre, *ye;
    stat_t<T>* stats;
    std::int32_t *choice, *slot_of, *token_of;
    explicit bufs(const C& c)
        : cap(static_cast<std::size_t>(capacity(static_cast<long long>(c.rows)))),
          slots(cap * Experts),
          tokens(double(c.rows) * (c.sig == signature::data_parallel ? c.n : 1)),
          probs(c.stash_values),
          h_pre(probs + c.rows * Experts),
          ye(h_pre + slots * Hidden),
          stats(c.stash_stats),
          choice(c.stash_ids),
          slot_of(choice + c.rows * TopK),
          token_of(slot_of + c.rows * TopK) {}
    static T* none() { return nullptr; }
  };
};

}  // namespace strata::layers
