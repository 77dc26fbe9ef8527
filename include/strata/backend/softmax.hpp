#pragma once
// The softmax / loss kernel family's front (dispatch.hpp): the fused softmax
// cross-entropy, its vocabulary-parallel pieces, and the loss books a step keeps in
// backend memory. exp in compute_t<T>, sums in double. Implementations:
// host/softmax.hpp, cuda/softmax.cuh.
//
// Labels. A label outside its range throws std::out_of_range naming the kernel, the
// first such row and the range (detail::bad_label): the host before writing anything, a
// device backend when raise_device_errors reads its error word back (the row's outputs
// are NaN meanwhile, and nothing out of bounds is read).
//
// A label of ignore_label (−100, PyTorch's ignore_index) marks a row that does not count:
// its loss and gradient are zero and the books skip it (a masked-language-model loss
// over the masked positions only).
#include <cstddef>
#include <cstdint>

#include "strata/backend/dispatch.hpp"
#include "strata/core/ignore_label.hpp"

namespace strata::backend {

namespace impl {
template <class Queue>
struct softmax_kernels;
}  // namespace impl

inline namespace kernels {

// loss[r] = logsumexp(logits[r, :]) - logits[r, labels[r]] for a rows x cols matrix
// (max-subtracted). probs_out (may be null, may alias logits) receives softmax(logits).
// labels must lie in [0, cols) or be ignore_label (loss 0). T: logits, probs; S: the loss.
template <class T, class S = T, kernel_queue Q>
void softmax_cross_entropy_forward(Q& q, std::size_t rows, std::size_t cols, const T* logits,
                                   const std::int32_t* labels, S* loss_per_row, T* probs_out) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  if (rows == 0) return;
  detail::need(cols > 0, "softmax_cross_entropy_forward", "cols must be positive");
  detail::need(logits && labels && loss_per_row, "softmax_cross_entropy_forward", "null pointer");
  impl::softmax_kernels<Q>::softmax_cross_entropy_forward(q, rows, cols, logits, labels, loss_per_row, probs_out);
}

// dlogits = scale * (probs - onehot(labels)), in compute_t<T> with scale rounded to it.
// dlogits may alias probs. labels must lie in [0, cols) or be ignore_label (a zero row).
template <class T, kernel_queue Q>
void softmax_cross_entropy_backward(Q& q, std::size_t rows, std::size_t cols, const T* probs,
                                    const std::int32_t* labels, double scale, T* dlogits) {
  static_assert(detail::is_elem_v<T>);
  if (rows * cols == 0) return;
  detail::need(probs && labels && dlogits, "softmax_cross_entropy_backward", "null pointer");
  impl::softmax_kernels<Q>::softmax_cross_entropy_backward(q, rows, cols, probs, labels, scale, dlogits);
}

// --- Vocabulary-parallel cross-entropy --------------------------------------
// Each rank holds logits[:, offset : offset + cols] (its vocabulary slice).
//   1. xent_local_max                -> all-reduce(max)  -> row_max
//   2. xent_local_sumexp(row_max)    -> all-reduce(sum)  -> sum_exp
//   3. xent_target_logit(offset)     -> all-reduce(sum)  -> target
//   4. xent_loss(row_max, sum_exp, target) -> loss (same on every rank)
//   5. xent_local_backward(...)      -> this rank's dlogits slice
// Step 3 may run together with 1 (it does not depend on it). T: logits; S: the row
// statistics.

// row_max[r] = max_j logits[r, j] (-inf for an empty slice).
template <class T, class S = T, kernel_queue Q>
void xent_local_max(Q& q, std::size_t rows, std::size_t cols, const T* logits, S* row_max) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  if (rows == 0) return;
  detail::need(row_max && (logits || cols == 0), "xent_local_max", "null pointer");
  impl::softmax_kernels<Q>::xent_local_max(q, rows, cols, logits, row_max);
}

// sum_exp[r] = sum_j exp(logits[r, j] - row_max[r]) with the GLOBAL row max.
template <class T, class S = T, kernel_queue Q>
void xent_local_sumexp(Q& q, std::size_t rows, std::size_t cols, const T* logits, const S* row_max, S* sum_exp) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  if (rows == 0) return;
  detail::need(row_max && sum_exp && (logits || cols == 0), "xent_local_sumexp", "null pointer");
  impl::softmax_kernels<Q>::xent_local_sumexp(q, rows, cols, logits, row_max, sum_exp);
}

// target[r] = logits[r, labels[r] - col_offset] when the label falls in this slice, else
// 0, so a sum over ranks yields the target logit; 0 for ignore_label (the row's loss is
// then meaningless: the books skip it). Other negative labels are out of range (the
// upper bound is checked by the caller, who knows the full vocabulary: see check_ids).
template <class T, class S = T, kernel_queue Q>
void xent_target_logit(Q& q, std::size_t rows, std::size_t cols, const T* logits, const std::int32_t* labels,
                       std::size_t col_offset, S* target) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  if (rows == 0) return;
  detail::need(labels && target && (logits || cols == 0), "xent_target_logit", "null pointer");
  impl::softmax_kernels<Q>::xent_target_logit(q, rows, cols, logits, labels, col_offset, target);
}

// loss[r] = log(sum_exp[r]) + row_max[r] - target[r], from all-reduced statistics.
template <class S, kernel_queue Q>
void xent_loss(Q& q, std::size_t rows, const S* row_max, const S* sum_exp, const S* target, S* loss) {
  static_assert(detail::is_real_v<S>);
  if (rows == 0) return;
  detail::need(row_max && sum_exp && target && loss, "xent_loss", "null pointer");
  impl::softmax_kernels<Q>::xent_loss(q, rows, row_max, sum_exp, target, loss);
}

// This rank's slice of dlogits = scale * (softmax - onehot), the softmax recomputed in
// compute_t<T> from the logits and the all-reduced row_max / sum_exp; a zero row for
// ignore_label. Other negative labels are out of range.
template <class T, class S = T, kernel_queue Q>
void xent_local_backward(Q& q, std::size_t rows, std::size_t cols, const T* logits, const std::int32_t* labels,
                         std::size_t col_offset, const S* row_max, const S* sum_exp, double scale, T* dlogits) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  if (rows * cols == 0) return;
  detail::need(logits && labels && row_max && sum_exp && dlogits, "xent_local_backward", "null pointer");
  impl::softmax_kernels<Q>::xent_local_backward(q, rows, cols, logits, labels, col_offset, row_max, sum_exp, scale,
                                                dlogits);
}

// acc[0] += Σ loss[r], acc[1] += #(target[r] ≥ row_max[r]), acc[2] += rows counted, over
// the first min(rows, valid) rows whose label is not ignore_label, deterministically. acc
// is 3 doubles of backend memory, so a step that never leaves the device (a captured graph) can keep the books. S: the
// statistics type (stat_t of the step's precision).
template <class S, kernel_queue Q>
void loss_accumulate(Q& q, std::size_t rows, std::size_t valid, const std::int32_t* labels, const S* loss,
                     const S* target, const S* row_max, double* acc) {
  static_assert(detail::is_real_v<S>);
  const std::size_t n = rows < valid ? rows : valid;
  if (n == 0) return;
  detail::need(labels && loss && target && row_max && acc, "loss_accumulate", "null pointer");
  impl::softmax_kernels<Q>::loss_accumulate(q, n, labels, loss, target, row_max, acc);
}

}  // namespace kernels

}  // namespace strata::backend
