#pragma once
// strata host backend, softmax cross-entropy: the host implementation of
// backend/softmax.hpp (the fused loss, the vocabulary-parallel pieces, the loss books).
// Labels are checked on the host before anything is written (detail::check_labels).
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
#include "strata/backend/softmax.hpp"

namespace strata::backend::host {

// Static members on arguments the front has checked (impl::softmax_kernels<queue>).
struct softmax_kernels {
  // Max-subtracted; one exp per element, kept in compute_t<T> until scaled; the sum in double.
  template <class T, class S>
  static void softmax_cross_entropy_forward(queue& q, std::size_t rows, std::size_t cols, const T* logits,
                                            const std::int32_t* labels, S* loss_per_row, T* probs_out) {
    using C = detail::compute_t<T>;
    detail::check_labels("softmax_cross_entropy_forward", labels, rows, 0, std::int64_t(cols), ignore_label);
    detail::for_rows(q, rows, cols, [&](std::size_t r) {
      const T* x = logits + r * cols;
      C m = C(x[0]);
      for (std::size_t j = 1; j < cols; ++j) m = C(x[j]) > m ? C(x[j]) : m;
      const bool counts = labels[r] != ignore_label;
      const C target = counts ? C(x[labels[r]]) : C(0);  // read before probs_out may overwrite x
      double s = 0;
      if (probs_out) {
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
      loss_per_row[r] = counts ? S(std::log(s) - double(target - m)) : S(0);
    });
  }

  template <class T>
  static void softmax_cross_entropy_backward(queue& q, std::size_t rows, std::size_t cols, const T* probs,
                                             const std::int32_t* labels, double scale, T* dlogits) {
    using C = detail::compute_t<T>;
    detail::check_labels("softmax_cross_entropy_backward", labels, rows, 0, std::int64_t(cols), ignore_label);
    const C s = C(scale);
    detail::for_rows(q, rows, cols, [&](std::size_t r) {
      const T* p = probs + r * cols;
      T* d = dlogits + r * cols;
      if (labels[r] == ignore_label) {
        std::fill(d, d + cols, T(0.0f));
        return;
      }
      const std::size_t l = std::size_t(labels[r]);
      const C pl = C(p[l]);  // read before an in-place overwrite
      for (std::size_t j = 0; j < cols; ++j) d[j] = T(s * C(p[j]));
      d[l] = T(s * (pl - C(1)));
    });
  }

  template <class T, class S>
  static void xent_local_max(queue& q, std::size_t rows, std::size_t cols, const T* logits, S* row_max) {
    using C = detail::compute_t<T>;
    detail::for_rows(q, rows, cols, [&](std::size_t r) {
      const T* x = logits + r * cols;
      C m = -std::numeric_limits<C>::infinity();
      for (std::size_t j = 0; j < cols; ++j) m = C(x[j]) > m ? C(x[j]) : m;
      row_max[r] = S(m);
    });
  }

  template <class T, class S>
  static void xent_local_sumexp(queue& q, std::size_t rows, std::size_t cols, const T* logits, const S* row_max,
                                S* sum_exp) {
    using C = detail::compute_t<T>;
    detail::for_rows(q, rows, cols, [&](std::size_t r) {
      const T* x = logits + r * cols;
      const C m = C(row_max[r]);
      double s = 0;
      for (std::size_t j = 0; j < cols; ++j) s += double(std::exp(C(x[j]) - m));
      sum_exp[r] = S(s);
    });
  }

  template <class T, class S>
  static void xent_target_logit(queue& q, std::size_t rows, std::size_t cols, const T* logits,
                                const std::int32_t* labels, std::size_t col_offset, S* target) {
    detail::check_labels("xent_target_logit", labels, rows, 0, std::numeric_limits<std::int32_t>::max(), ignore_label);
    detail::for_rows(q, rows, 1, [&](std::size_t r) {
      const std::size_t l = std::size_t(labels[r]);
      target[r] = labels[r] == ignore_label ? S(0)
                  : (l >= col_offset && l - col_offset < cols) ? S(logits[r * cols + (l - col_offset)]) : S(0);
    });
  }

  template <class S>
  static void xent_loss(queue& q, std::size_t rows, const S* row_max, const S* sum_exp, const S* target, S* loss) {
    detail::for_rows(q, rows, 1, [&](std::size_t r) {
      loss[r] = S(std::log(double(sum_exp[r])) - (double(target[r]) - double(row_max[r])));
    });
  }

  template <class T, class S>
  static void xent_local_backward(queue& q, std::size_t rows, std::size_t cols, const T* logits,
                                  const std::int32_t* labels, std::size_t col_offset, const S* row_max,
                                  const S* sum_exp, double scale, T* dlogits) {
    using C = detail::compute_t<T>;
    detail::check_labels("xent_local_backward", labels, rows, 0, std::numeric_limits<std::int32_t>::max(), ignore_label);
    const C s = C(scale);
    detail::for_rows(q, rows, cols, [&](std::size_t r) {
      const T* x = logits + r * cols;
      T* d = dlogits + r * cols;
      if (labels[r] == ignore_label) {
        std::fill(d, d + cols, T(0.0f));
        return;
      }
      const C m = C(row_max[r]);
      const C inv = C(1.0 / double(sum_exp[r]));
      const std::size_t l = std::size_t(labels[r]);
      const bool mine = l >= col_offset && l - col_offset < cols;
      const C xl = mine ? C(x[l - col_offset]) : C(0);  // read before an in-place overwrite
      for (std::size_t j = 0; j < cols; ++j) d[j] = T(s * (std::exp(C(x[j]) - m) * inv));
      if (mine) d[l - col_offset] = T(s * (std::exp(xl - m) * inv - C(1)));
    });
  }

  template <class S>
  static void loss_accumulate(queue&, std::size_t n, const std::int32_t* labels, const S* loss, const S* target,
                              const S* row_max, double* acc) {
    double sum = 0, correct = 0, counted = 0;
    for (std::size_t r = 0; r < n; ++r) {
      if (labels[r] == ignore_label) continue;
      sum += static_cast<double>(loss[r]);
      correct += target[r] >= row_max[r] ? 1.0 : 0.0;
      counted += 1.0;
    }
    acc[0] += sum;
    acc[1] += correct;
    acc[2] += counted;
  }
};

}  // namespace strata::backend::host

namespace strata::backend::impl {
template <>
struct softmax_kernels<host::queue> : host::softmax_kernels {};
}  // namespace strata::backend::impl
