#pragma once
// SoftmaxCrossEntropy: mean cross-entropy of logits [.., C] against integer labels,
// one label per row. When the logits arrive split along C (after a column-parallel
// Linear, or as S(0,-1) blocks of the 2D/2.5D/3D modes) it runs vocabulary-parallel: the
// row max, Σexp and target logit are all-reduced over the devices that hold the row's
// other classes (the part; a mesh row), and each device keeps its slice of the gradient.
// A label of ignore_label (−100) does not count: the step's loss is the mean over the
// counted rows of the whole global batch (the trainer rescales the gradient once the
// count is known).
#include "strata/core/communicator.hpp"
#include "strata/layers/layer.hpp"

namespace strata::layers {

// A loss call's rows into the step's books (c.loss->acc: Σ loss, correct rows, counted rows)
// from each row's loss, target score and maximum (correct: target ≥ maximum): the rows of
// the valid samples (an evaluation's padding left out), labels of ignore_label skipped. The
// valid rows lead each piece of the local rows (two under ContextAllGather and ContextRing, [piece][sample]).
template <class C, class S>
void book_loss_rows(C& c, const S* loss, const S* target, const S* row_max) {
  const auto& l = *c.loss;
  const std::size_t n = std::size_t(c.pieces()), rows = c.rows / n;
  const std::size_t valid = l.valid == static_cast<std::size_t>(-1) ? l.valid : l.valid / n;
  for (std::size_t h = 0; h < n; ++h)
    loss_accumulate(c.q, rows, valid, l.labels + h * rows, loss + h * rows, target + h * rows, row_max + h * rows,
                    l.acc);
}

struct SoftmaxCrossEntropy {
  static constexpr std::string_view name = "SoftmaxCrossEntropy";
  static constexpr layer_role role = layer_role::loss;
  static constexpr shape_t in_shape{};
  static constexpr shape_t out_shape(shape_t) { return shape_v<1>; }
  static constexpr std::array<param_t, 0> params{};
  static constexpr long long forward_flops(shape_t in) { return 5LL * in.numel(); }
  static constexpr long long backward_flops(shape_t in) { return 2LL * in.numel(); }

  static constexpr shard_choice shard(const shard_query& q) {
    shard_choice c;
    if (q.arrives == sbp::split_feature) {
      c.sig = signature::vocab_loss;
      c.need = c.out = sbp::split_feature;
      c.feat_div = q.n;
      c.flops_div = q.n;
      // per row: the max, the sum of exponentials and the target logit
      const long long rows = q.micro_batch * q.in.rows();
      c.add(collective::all_reduce, group_axis::part, pass::forward, rows, 3, /*stats=*/true);
    } else {
      c.need = c.out = q.arrives == sbp::split_batch ? sbp::split_batch : sbp::broadcast;
      sharding::split_share(c, q.n);
      if (c.need != sbp::split_batch) c.flops_div = 1;
    }
    return c;
  }

  // Vocabulary-parallel: the logits slice and each row's max and Σexp (the softmax is
  // recomputed in backward); else the probabilities. Scratch: per-row target logit,
  // loss and max.
  static constexpr buffer_needs memory(const local_dims& d) {
    if (d.sig == signature::vocab_loss)
      return {.keep_input = true, .stash_stats = 2 * d.rows, .scratch_stats = 2 * d.rows};
    return {.stash_values = d.rows * d.in_cols, .scratch_stats = 3 * d.rows};
  }

  // c.loss: labels (one per local row), the books (Σ loss, correct rows, rows; backend
  // memory), d(step loss)/d(row loss), which rows count here and how many are data.
  template <class C>
  static void forward(C& c) {
    const std::size_t R = c.rows, K = c.in_cols;
    auto& L = *c.loss;
    auto* target = c.scratch_stats;
    auto* loss = c.scratch_stats + R;
    if (c.sig == signature::vocab_loss) {
      auto* row_max = c.stash_stats;
      auto* sum_exp = c.stash_stats + R;
      auto& row = *c.mesh[0];
      xent_local_max(c.q, R, K, c.x, row_max);
      row.all_reduce(row_max, R, comm::reduce_op::max);
      xent_local_sumexp(c.q, R, K, c.x, row_max, sum_exp);
      row.all_reduce(sum_exp, R, comm::reduce_op::sum);
      xent_target_logit(c.q, R, K, c.x, L.labels, c.col0, target);
      row.all_reduce(target, R, comm::reduce_op::sum);
      xent_loss(c.q, R, row_max, sum_exp, target, loss);
      if (L.counts) book_loss_rows(c, loss, target, row_max);
    } else {
      auto* row_max = c.scratch_stats + 2 * R;
      softmax_cross_entropy_forward(c.q, R, K, c.x, L.labels, loss, c.stash_values);
      xent_local_max(c.q, R, K, c.x, row_max);
      xent_target_logit(c.q, R, K, c.x, L.labels, 0, target);
      if (L.counts) book_loss_rows(c, loss, target, row_max);
    }
  }
  template <class C>
  static void backward(C& c) {
    const std::size_t R = c.rows, K = c.in_cols;
    auto& L = *c.loss;
    if (c.sig == signature::vocab_loss)
      xent_local_backward(c.q, R, K, c.x, L.labels, c.col0, c.stash_stats, c.stash_stats + R,
                          L.scale, c.dx);
    else
      softmax_cross_entropy_backward(c.q, R, K, c.stash_values, L.labels, L.scale, c.dx);
  }
};

}  // namespace strata::layers
