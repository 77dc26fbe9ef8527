#pragma once
// strata host backend, softmax cross-entropy: the fused loss, the vocabulary-parallel
// pieces, and the loss books a step keeps in backend memory.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/backend/host/launch.hpp"

namespace strata::backend::host {


// ---------------------------------------------------------------------------
// Softmax cross-entropy
// ---------------------------------------------------------------------------

// loss[r] = logsumexp(logits[r, :]) - logits[r, labels[r]] for a rows x cols
// matrix (max-subtracted, exp in T, sum in double). probs_out (may be null,
// may alias logits) receives softmax(logits). labels must lie in [0, cols),
// else std::out_of_range.
template <class T, class S = T>
void softmax_cross_entropy_forward(queue& q, std::size_t rows, std::size_t cols, const T* logits,
                                   const std::int32_t* labels, S* loss_per_row, T* probs_out) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  using C = detail::compute_t<T>;
  if (rows == 0) return;
  detail::need(cols > 0, "softmax_cross_entropy_forward", "cols must be positive");
  detail::need(logits && labels && loss_per_row, "softmax_cross_entropy_forward", "null pointer");
  detail::check_labels("softmax_cross_entropy_forward", labels, rows, 0, std::int64_t(cols));
  detail::for_rows(q, rows, cols, [&](std::size_t r) {
    const T* x = logits + r * cols;
    C m = C(x[0]);
    for (std::size_t j = 1; j < cols; ++j) m = C(x[j]) > m ? C(x[j]) : m;
    const C target = C(x[labels[r]]);  // read before probs_out may overwrite x
    double s = 0;
    if (probs_out) {
      // One exp per element, kept in C (not the possibly narrower T) until scaled.
      T* p = probs_out + r * cols;
      if constexpr (std::is_same_v<C, T>) {
        for (std::size_t j = 0; j < cols; ++j) {
          p[j] = std::exp(x[j] - m);
          s += double(p[j]);
        }
        const C inv = C(1.0 / s);
        for (std::size_t j = 0; j < cols; ++j) p[j] *= inv;
      } else {
        for (std::size_t j = 0; j < cols; ++j) s += double(std::exp(C(x[j]) - m));
        const C inv = C(1.0 / s);
        for (std::size_t j = 0; j < cols; ++j) p[j] = T(std::exp(C(x[j]) - m) * inv);
      }
    } else {
      for (std::size_t j = 0; j < cols; ++j) s += double(std::exp(C(x[j]) - m));
    }
    // log(s) >= 0 and x[label] - m <= 0: no cancellation between large terms.
    loss_per_row[r] = S(std::log(s) - double(target - m));
  });
}

// dlogits = scale * (probs - onehot(labels)). dlogits may alias probs.
template <class T>
void softmax_cross_entropy_backward(queue& q, std::size_t rows, std::size_t cols, const T* probs,
                                    const std::int32_t* labels, double scale, T* dlogits) {
  static_assert(detail::is_elem_v<T>);
  using C = detail::compute_t<T>;
  if (rows * cols == 0) return;
  detail::need(probs && labels && dlogits, "softmax_cross_entropy_backward", "null pointer");
  detail::check_labels("softmax_cross_entropy_backward", labels, rows, 0, std::int64_t(cols));
  const C s = C(scale);
  detail::for_rows(q, rows, cols, [&](std::size_t r) {
    const T* p = probs + r * cols;
    T* d = dlogits + r * cols;
    const std::size_t l = std::size_t(labels[r]);
    const C pl = C(p[l]);  // read before an in-place overwrite
    for (std::size_t j = 0; j < cols; ++j) d[j] = T(s * C(p[j]));
    d[l] = T(s * (pl - C(1)));
  });
}

// --- Vocabulary-parallel cross-entropy --------------------------------------
// Each rank holds logits[:, offset : offset + cols] (its vocabulary slice).
//   1. xent_local_max                -> all-reduce(max)  -> row_max
//   2. xent_local_sumexp(row_max)    -> all-reduce(sum)  -> sum_exp
//   3. xent_target_logit(offset)     -> all-reduce(sum)  -> target
//   4. xent_loss(row_max, sum_exp, target) -> loss (same on every rank)
//   5. xent_local_backward(...)      -> this rank's dlogits slice
// Step 3 may run together with 1 (it does not depend on it).

// row_max[r] = max_j logits[r, j] (-inf for an empty slice).
template <class T, class S = T>
void xent_local_max(queue& q, std::size_t rows, std::size_t cols, const T* logits, S* row_max) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  using C = detail::compute_t<T>;
  if (rows == 0) return;
  detail::need(row_max && (logits || cols == 0), "xent_local_max", "null pointer");
  detail::for_rows(q, rows, cols, [&](std::size_t r) {
    const T* x = logits + r * cols;
    C m = -std::numeric_limits<C>::infinity();
    for (std::size_t j = 0; j < cols; ++j) m = C(x[j]) > m ? C(x[j]) : m;
    row_max[r] = S(m);
  });
}

// sum_exp[r] = sum_j exp(logits[r, j] - row_max[r]) with the GLOBAL row max.
template <class T, class S = T>
void xent_local_sumexp(queue& q, std::size_t rows, std::size_t cols, const T* logits, const S* row_max, S* sum_exp) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  using C = detail::compute_t<T>;
  if (rows == 0) return;
  detail::need(row_max && sum_exp && (logits || cols == 0), "xent_local_sumexp", "null pointer");
  detail::for_rows(q, rows, cols, [&](std::size_t r) {
    const T* x = logits + r * cols;
    const C m = C(row_max[r]);
    double s = 0;
    for (std::size_t j = 0; j < cols; ++j) s += double(std::exp(C(x[j]) - m));
    sum_exp[r] = S(s);
  });
}

// target[r] = logits[r, labels[r] - col_offset] when the label falls in this
// slice, else 0, so a sum over ranks yields the target logit. Negative labels
// throw std::out_of_range (the upper bound is checked by the caller, who knows
// the full vocabulary: see check_ids).
template <class T, class S = T>
void xent_target_logit(queue& q, std::size_t rows, std::size_t cols, const T* logits, const std::int32_t* labels,
                       std::size_t col_offset, S* target) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  if (rows == 0) return;
  detail::need(labels && target && (logits || cols == 0), "xent_target_logit", "null pointer");
  detail::check_labels("xent_target_logit", labels, rows, 0, std::numeric_limits<std::int32_t>::max());
  detail::for_rows(q, rows, 1, [&](std::size_t r) {
    const std::size_t l = std::size_t(labels[r]);
    target[r] = (l >= col_offset && l - col_offset < cols) ? S(logits[r * cols + (l - col_offset)]) : S(0);
  });
}

// loss[r] = log(sum_exp[r]) + row_max[r] - target[r], from all-reduced stats.
template <class T>
void xent_loss(queue& q, std::size_t rows, const T* row_max, const T* sum_exp, const T* target, T* loss) {
  static_assert(detail::is_real_v<T>);
  if (rows == 0) return;
  detail::need(row_max && sum_exp && target && loss, "xent_loss", "null pointer");
  detail::for_rows(q, rows, 1, [&](std::size_t r) {
    loss[r] = T(std::log(double(sum_exp[r])) - (double(target[r]) - double(row_max[r])));
  });
}

// This rank's slice of dlogits = scale * (softmax - onehot), recomputing the
// softmax from the logits and the all-reduced row_max / sum_exp.
template <class T, class S = T>
void xent_local_backward(queue& q, std::size_t rows, std::size_t cols, const T* logits, const std::int32_t* labels,
                         std::size_t col_offset, const S* row_max, const S* sum_exp, double scale, T* dlogits) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  using C = detail::compute_t<T>;
  if (rows * cols == 0) return;
  detail::need(logits && labels && row_max && sum_exp && dlogits, "xent_local_backward", "null pointer");
  detail::check_labels("xent_local_backward", labels, rows, 0, std::numeric_limits<std::int32_t>::max());
  const C s = C(scale);
  detail::for_rows(q, rows, cols, [&](std::size_t r) {
    const T* x = logits + r * cols;
    T* d = dlogits + r * cols;
    const C m = C(row_max[r]);
    const C inv = C(1.0 / double(sum_exp[r]));
    const std::size_t l = std::size_t(labels[r]);
    const bool mine = l >= col_offset && l - col_offset < cols;
    const C xl = mine ? C(x[l - col_offset]) : C(0);  // read before an in-place overwrite
    for (std::size_t j = 0; j < cols; ++j) d[j] = T(s * (std::exp(C(x[j]) - m) * inv));
    if (mine) d[l - col_offset] = T(s * (std::exp(xl - m) * inv - C(1)));
  });
}

// acc[0] += Σ loss[r], acc[1] += #(target[r] ≥ row_max[r]), acc[2] += rows counted, over
// the first min(rows, valid) rows. acc lives in backend memory, so a step that never
// leaves the device (a captured graph) can keep the books.
template <class T>
void loss_accumulate(queue&, std::size_t rows, std::size_t valid, const T* loss, const T* target, const T* row_max,
                     double* acc) {
  static_assert(detail::is_real_v<T>);
  const std::size_t n = rows < valid ? rows : valid;
  double sum = 0, correct = 0;
  for (std::size_t r = 0; r < n; ++r) {
    sum += static_cast<double>(loss[r]);
    correct += target[r] >= row_max[r] ? 1.0 : 0.0;
  }
  acc[0] += sum;
  acc[1] += correct;
  acc[2] += static_cast<double>(n);
}

}  // namespace strata::backend::host
