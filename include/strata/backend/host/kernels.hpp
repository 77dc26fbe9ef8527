// strata host backend: the kernel set every backend provides.
//
// Conventions (shared with device backends, which implement the same
// signatures with their own queue type):
//  * first argument is the queue; work is ordered on it (here: done on return);
//  * raw pointers + element counts, row-major, contiguous rows unless an ld is
//    given; "rows x cols" means element (r, c) lives at p[r * cols + c];
//  * T is float or double, and for the kernels mixed-precision training uses,
//    also bf16 (a storage type: such a kernel loads bf16, computes in float and
//    rounds its bf16 outputs to nearest even). Statistics (S) and gradients
//    (G) may have their own real type, so a bf16 step writes float row
//    statistics and float master gradients;
//  * hyper-parameters are passed as double and rounded to T where they meet
//    tensor data (what PyTorch does with Python floats);
//  * an output may alias an input only where a kernel says so;
//  * invalid arguments throw before any output is written.
//
// Numerics: elementwise work runs in T. Long reductions (sums over rows or a
// whole tensor, layernorm statistics, softmax denominators) accumulate in
// double even for float data: this backend is the accuracy reference, and the
// cost is negligible next to memory traffic. GEMM accumulates in T (see
// gemm.hpp), like cuBLAS without split-K.
//
// Determinism: every output element is computed by one task with a fixed
// operation order; whole-tensor reductions sum fixed-size chunks and combine
// the chunk results in index order. Results therefore do not depend on the
// thread count (under IEEE-conforming flags: -ffast-math lets the compiler
// reassociate differently per call site and voids this).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "gemm.hpp"
#include "host.hpp"
#include "strata/backend/bf16.hpp"

namespace strata::backend {

// Pointwise nonlinearity fused after a bias add. gelu is the tanh
// approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
enum class activation : unsigned char { none, relu, gelu };

}  // namespace strata::backend

namespace strata::backend::host {

namespace detail {

template <class T>
inline constexpr bool is_real_v = std::is_same_v<T, float> || std::is_same_v<T, double>;
// Element types of activations: the reals and bf16.
template <class T>
inline constexpr bool is_elem_v = is_real_v<T> || std::is_same_v<T, bf16>;
// Arithmetic type for elementwise work on T (bf16 computes in float).
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, bf16>, float, T>;

// Elements per task for streaming kernels: large enough that scheduling
// (~microseconds) is noise, small enough to split mid-sized tensors.
inline constexpr std::size_t grain = std::size_t(1) << 15;
// Fixed chunk for whole-tensor reductions. Part of the result's definition
// (it fixes the summation order), so it must not depend on the thread count.
inline constexpr std::size_t reduce_chunk = std::size_t(1) << 14;

// f(begin, end) over [0, n) in grain-sized pieces on q's threads.
template <class F>
void for_range(queue& q, std::size_t n, std::size_t g, F&& f) {
  if (n == 0) return;
  g = std::max<std::size_t>(g, 1);
  const std::size_t tasks = (n + g - 1) / g;
  if (tasks == 1) return f(std::size_t(0), n);
  q.parallel_for(tasks, [&](std::size_t t) { f(t * g, std::min(n, (t + 1) * g)); });
}

// f(r) for every row r of a rows x cols problem, batching rows per task.
template <class F>
void for_rows(queue& q, std::size_t rows, std::size_t cols, F&& f) {
  const std::size_t per = std::max<std::size_t>(1, grain / std::max<std::size_t>(cols, 1));
  for_range(q, rows, per, [&](std::size_t b, std::size_t e) {
    for (std::size_t r = b; r < e; ++r) f(r);
  });
}

// Column blocks for column reductions (bias/gamma gradients): each task owns
// a block of columns and walks all rows in order -> deterministic sums.
inline constexpr std::size_t col_block = 256;

[[noreturn]] inline void fail(const char* kernel, const std::string& what) {
  throw std::invalid_argument(std::string("strata: ") + kernel + ": " + what);
}
inline void need(bool ok, const char* kernel, const char* what) {
  if (!ok) fail(kernel, what);
}

// Throws std::out_of_range naming the first label outside [lo, hi).
inline void check_labels(const char* kernel, const std::int32_t* labels, std::size_t rows, std::int64_t lo,
                         std::int64_t hi) {
  for (std::size_t r = 0; r < rows; ++r) {
    const std::int64_t l = labels[r];
    if (l < lo || l >= hi)
      throw std::out_of_range(std::string("strata: ") + kernel + ": label " + std::to_string(l) + " at row " +
                              std::to_string(r) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) +
                              ")");
  }
}

template <class T>
inline T act_forward(activation a, T x) {
  switch (a) {
    case activation::relu:
      return x < T(0) ? T(0) : x;  // NaN passes through (a NaN check then sees it)
    case activation::gelu: {
      constexpr T c = T(0.7978845608028653558798921198687637);  // sqrt(2/pi)
      constexpr T k = T(0.044715);
      return T(0.5) * x * (T(1) + std::tanh(c * (x + k * x * x * x)));
    }
    default:
      return x;
  }
}

// d act / dx at x (relu: 0 at x == 0, as PyTorch).
template <class T>
inline T act_derivative(activation a, T x) {
  switch (a) {
    case activation::relu:
      return x > T(0) ? T(1) : T(0);
    case activation::gelu: {
      constexpr T c = T(0.7978845608028653558798921198687637);
      constexpr T k = T(0.044715);
      const T t = std::tanh(c * (x + k * x * x * x));
      return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * c * (T(1) + T(3) * k * x * x);
    }
    default:
      return T(1);
  }
}

}  // namespace detail

// ---------------------------------------------------------------------------
// Bias + activation
// ---------------------------------------------------------------------------

// y = act(x + bias) over a rows x cols matrix; bias (length cols) may be null.
// If pre_out is non-null it receives x + bias (needed by the backward pass).
// pre_out and y may each alias x.
template <class T>
void bias_activation_forward(queue& q, activation act, std::size_t rows, std::size_t cols, const T* x, const T* bias,
                             T* pre_out, T* y) {
  static_assert(detail::is_elem_v<T>);
  using C = detail::compute_t<T>;
  if (rows * cols == 0) return;
  detail::need(x && y, "bias_activation_forward", "x and y must be non-null");
  // The activation is a template argument of the row loop so relu/none
  // vectorise instead of switching per element.
  auto run = [&](auto act_c) {
    detail::for_rows(q, rows, cols, [&](std::size_t r) {
      const T* xr = x + r * cols;
      T* yr = y + r * cols;
      T* pr = pre_out ? pre_out + r * cols : nullptr;
      for (std::size_t j = 0; j < cols; ++j) {
        const C b = bias ? C(bias[j]) : C(0);
        const C v = bias ? C(xr[j]) + b : C(xr[j]);
        // pre_out holds the value the activation saw, rounded like y
        if (pr) pr[j] = T(v);
        yr[j] = T(detail::act_forward(decltype(act_c)::value, v));
      }
    });
  };
  switch (act) {
    case activation::relu:
      return run(std::integral_constant<activation, activation::relu>{});
    case activation::gelu:
      return run(std::integral_constant<activation, activation::gelu>{});
    default:
      return run(std::integral_constant<activation, activation::none>{});
  }
}

// dx = dy * act'(pre), n elements. dx may alias dy.
template <class T>
void activation_backward(queue& q, activation act, std::size_t n, const T* pre, const T* dy, T* dx) {
  static_assert(detail::is_elem_v<T>);
  using C = detail::compute_t<T>;
  if (n == 0) return;
  detail::need(dy && dx && (pre || act == activation::none), "activation_backward", "null pointer");
  detail::for_range(q, n, detail::grain, [&](std::size_t b, std::size_t e) {
    if (act == activation::none) {
      for (std::size_t i = b; i < e; ++i) dx[i] = dy[i];
    } else if (act == activation::relu) {
      for (std::size_t i = b; i < e; ++i) dx[i] = C(pre[i]) > C(0) ? dy[i] : T(C(0));
    } else {
      for (std::size_t i = b; i < e; ++i) dx[i] = T(C(dy[i]) * detail::act_derivative(act, C(pre[i])));
    }
  });
}

// dbias[c] (=|+=) sum over rows of dy[r, c]; double accumulation. G may be
// wider than T (bf16 activations, float master gradients).
template <class T, class G = T>
void bias_grad(queue& q, std::size_t rows, std::size_t cols, const T* dy, G* dbias, bool accumulate) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<G>);
  if (cols == 0) return;
  detail::need(dbias && (dy || rows == 0), "bias_grad", "null pointer");
  const std::size_t blocks = (cols + detail::col_block - 1) / detail::col_block;
  q.parallel_for(blocks, [&](std::size_t blk) {
    const std::size_t c0 = blk * detail::col_block, nc = std::min(detail::col_block, cols - c0);
    double acc[detail::col_block];
    for (std::size_t j = 0; j < nc; ++j) acc[j] = accumulate ? double(dbias[c0 + j]) : 0.0;
    for (std::size_t r = 0; r < rows; ++r) {
      const T* d = dy + r * cols + c0;
      for (std::size_t j = 0; j < nc; ++j) acc[j] += double(d[j]);
    }
    for (std::size_t j = 0; j < nc; ++j) dbias[c0 + j] = G(acc[j]);
  });
}

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

// ---------------------------------------------------------------------------
// LayerNorm over the last dimension D
// ---------------------------------------------------------------------------

// y = (x - mean) * rstd * gamma + beta per row, rstd = 1/sqrt(var + eps),
// biased variance (PyTorch). Statistics in double (two-pass); gamma/beta may
// be null (no affine); mean_out/rstd_out (length rows) may be null if no
// backward pass follows. y may alias x.
template <class T, class S = T>
void layernorm_forward(queue& q, std::size_t rows, std::size_t D, const T* x, const T* gamma, const T* beta, double eps,
                       T* y, S* mean_out, S* rstd_out) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S>);
  if (rows == 0) return;
  detail::need(D > 0, "layernorm_forward", "D must be positive");
  detail::need(x && y, "layernorm_forward", "null pointer");
  detail::for_rows(q, rows, D, [&](std::size_t r) {
    const T* xr = x + r * D;
    T* yr = y + r * D;
    double mean = 0;
    for (std::size_t j = 0; j < D; ++j) mean += double(xr[j]);
    mean /= double(D);
    double var = 0;
    for (std::size_t j = 0; j < D; ++j) {
      const double c = double(xr[j]) - mean;
      var += c * c;
    }
    var /= double(D);
    const double rstd = 1.0 / std::sqrt(var + eps);
    if (mean_out) mean_out[r] = S(mean);
    if (rstd_out) rstd_out[r] = S(rstd);
    for (std::size_t j = 0; j < D; ++j) {
      double v = (double(xr[j]) - mean) * rstd;
      if (gamma) v *= double(gamma[j]);
      if (beta) v += double(beta[j]);
      yr[j] = T(v);
    }
  });
}

// Given the forward's mean/rstd (as stored, i.e. rounded to S):
//   xhat = (x - mean) * rstd,  g = dy * gamma
//   dx = rstd * (g - mean_j(g) - xhat * mean_j(g * xhat))        (overwritten)
//   dgamma (=|+=) sum_rows dy * xhat,  dbeta (=|+=) sum_rows dy   (accumulate)
// gamma null means 1. dx, dgamma, dbeta may each be null to skip them.
template <class T, class S = T, class G = S>
void layernorm_backward(queue& q, std::size_t rows, std::size_t D, const T* x, const T* gamma, const S* mean,
                        const S* rstd, const T* dy, T* dx, G* dgamma, G* dbeta, bool accumulate) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<S> && detail::is_real_v<G>);
  if (D == 0) return;
  detail::need(rows == 0 || (x && mean && rstd && dy), "layernorm_backward", "null pointer");
  if (dx && rows > 0) {
    detail::for_rows(q, rows, D, [&](std::size_t r) {
      const T* xr = x + r * D;
      const T* dyr = dy + r * D;
      const double mu = double(mean[r]), rs = double(rstd[r]);
      double sg = 0, sgx = 0;
      for (std::size_t j = 0; j < D; ++j) {
        const double g = double(dyr[j]) * (gamma ? double(gamma[j]) : 1.0);
        sg += g;
        sgx += g * (double(xr[j]) - mu) * rs;
      }
      sg /= double(D);
      sgx /= double(D);
      T* dxr = dx + r * D;
      for (std::size_t j = 0; j < D; ++j) {
        const double g = double(dyr[j]) * (gamma ? double(gamma[j]) : 1.0);
        const double xh = (double(xr[j]) - mu) * rs;
        dxr[j] = T(rs * (g - sg - xh * sgx));
      }
    });
  }
  if (!dgamma && !dbeta) return;
  const std::size_t blocks = (D + detail::col_block - 1) / detail::col_block;
  q.parallel_for(blocks, [&](std::size_t blk) {
    const std::size_t c0 = blk * detail::col_block, nc = std::min(detail::col_block, D - c0);
    double ag[detail::col_block], ab[detail::col_block];
    for (std::size_t j = 0; j < nc; ++j) {
      ag[j] = (accumulate && dgamma) ? double(dgamma[c0 + j]) : 0.0;
      ab[j] = (accumulate && dbeta) ? double(dbeta[c0 + j]) : 0.0;
    }
    for (std::size_t r = 0; r < rows; ++r) {
      const T* xr = x + r * D + c0;
      const T* dyr = dy + r * D + c0;
      const double mu = double(mean[r]), rs = double(rstd[r]);
      for (std::size_t j = 0; j < nc; ++j) {
        ag[j] += double(dyr[j]) * ((double(xr[j]) - mu) * rs);
        ab[j] += double(dyr[j]);
      }
    }
    for (std::size_t j = 0; j < nc; ++j) {
      if (dgamma) dgamma[c0 + j] = G(ag[j]);
      if (dbeta) dbeta[c0 + j] = G(ab[j]);
    }
  });
}

// ---------------------------------------------------------------------------
// Embedding (optionally vocabulary-parallel)
// ---------------------------------------------------------------------------

// Throws std::out_of_range naming the first id outside [0, vocab) and its
// position. Host-side validation of token ids / labels before a step.
inline void check_ids(const std::int32_t* ids, std::size_t n, std::size_t vocab) {
  if (n && !ids) throw std::invalid_argument("strata: check_ids: null ids");
  for (std::size_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || std::size_t(ids[i]) >= vocab)
      throw std::out_of_range("strata: token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                              " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  }
}
inline void check_ids(queue&, const std::int32_t* ids, std::size_t n, std::size_t vocab) { check_ids(ids, n, vocab); }

// out[r, :] = table[ids[r] - vocab_offset, :] if ids[r] is in this rank's
// slice [vocab_offset, vocab_offset + vocab_local), else 0: summing the
// outputs of all slices gives the full lookup. table is vocab_local x D.
// Negative ids throw std::out_of_range; ids >= the full vocabulary cannot be
// seen here (they look like another rank's), so validate with check_ids.
template <class T>
void embedding_forward(queue& q, std::size_t rows, std::size_t D, const std::int32_t* ids, const T* table,
                       std::size_t vocab_offset, std::size_t vocab_local, T* out) {
  static_assert(detail::is_elem_v<T>);
  if (rows * D == 0) return;
  detail::need(ids && out && (table || vocab_local == 0), "embedding_forward", "null pointer");
  detail::check_labels("embedding_forward", ids, rows, 0, std::numeric_limits<std::int32_t>::max());
  detail::for_rows(q, rows, D, [&](std::size_t r) {
    const std::size_t id = std::size_t(ids[r]);
    T* o = out + r * D;
    if (id >= vocab_offset && id - vocab_offset < vocab_local) {
      const T* src = table + (id - vocab_offset) * D;
      for (std::size_t j = 0; j < D; ++j) o[j] = src[j];
    } else {
      for (std::size_t j = 0; j < D; ++j) o[j] = T(0.0f);
    }
  });
}

// dtable[ids[r] - vocab_offset, :] += dout[r, :] for ids in this slice, in
// row order (deterministic; accumulation in G as rows are added one by one).
// accumulate == false zeroes the vocab_local x D table first.
template <class T, class G = T>
void embedding_backward(queue& q, std::size_t rows, std::size_t D, const std::int32_t* ids, const T* dout,
                        std::size_t vocab_offset, std::size_t vocab_local, G* dtable, bool accumulate) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<G>);
  if (D == 0 || vocab_local == 0) return;
  detail::need(dtable && (rows == 0 || (ids && dout)), "embedding_backward", "null pointer");
  detail::check_labels("embedding_backward", ids, rows, 0, std::numeric_limits<std::int32_t>::max());
  if (!accumulate)
    detail::for_range(q, vocab_local * D, detail::grain,
                      [&](std::size_t b, std::size_t e) { std::fill(dtable + b, dtable + e, G(0)); });
  // Tasks own column blocks and walk rows in order, so repeated ids are
  // summed in the same order for any thread count.
  const std::size_t blocks = (D + detail::col_block - 1) / detail::col_block;
  q.parallel_for(blocks, [&](std::size_t blk) {
    const std::size_t c0 = blk * detail::col_block, nc = std::min(detail::col_block, D - c0);
    for (std::size_t r = 0; r < rows; ++r) {
      const std::size_t id = std::size_t(ids[r]);
      if (id < vocab_offset || id - vocab_offset >= vocab_local) continue;
      G* d = dtable + (id - vocab_offset) * D + c0;
      const T* g = dout + r * D + c0;
      for (std::size_t j = 0; j < nc; ++j) d[j] += G(g[j]);
    }
  });
}

// ---------------------------------------------------------------------------
// BLAS-1 and reductions
// ---------------------------------------------------------------------------

namespace detail {
// Fixed-chunk reduction: chunk sums in 8 interleaved double lanes (lets the
// compiler vectorise without reassociating), chunks combined in order.
template <class T, class Op>
double reduce(queue& q, std::size_t n, const T* x, Op op) {
  if (n == 0) return 0.0;
  const std::size_t chunks = (n + reduce_chunk - 1) / reduce_chunk;
  std::vector<double> part(chunks);
  const std::size_t per_task = std::max<std::size_t>(1, grain / reduce_chunk);
  for_range(q, chunks, per_task, [&](std::size_t cb, std::size_t ce) {
    for (std::size_t c = cb; c < ce; ++c) {
      const std::size_t b = c * reduce_chunk, e = std::min(n, b + reduce_chunk);
      double lane[8] = {};
      std::size_t i = b;
      for (; i + 8 <= e; i += 8)
        for (std::size_t l = 0; l < 8; ++l) lane[l] += op(double(x[i + l]));
      for (; i < e; ++i) lane[0] += op(double(x[i]));
      part[c] = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    }
  });
  double s = 0;
  for (double p : part) s += p;
  return s;
}
}  // namespace detail

// Sum of x[0..n) in double. (Device backends return it through a host sync.)
template <class T>
double sum(queue& q, std::size_t n, const T* x) {
  static_assert(detail::is_elem_v<T>);
  return detail::reduce(q, n, x, [](double v) { return v; });
}

// Sum of squares of x[0..n) in double: gradient-norm building block.
template <class T>
double sum_squares(queue& q, std::size_t n, const T* x) {
  static_assert(detail::is_elem_v<T>);
  return detail::reduce(q, n, x, [](double v) { return v * v; });
}

// x *= alpha
template <class T>
void scale(queue& q, std::size_t n, double alpha, T* x) {
  static_assert(detail::is_real_v<T>);
  const T a = T(alpha);
  detail::for_range(q, n, detail::grain, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) x[i] *= a;
  });
}

// y += alpha * x
template <class T>
void axpy(queue& q, std::size_t n, double alpha, const T* x, T* y) {
  static_assert(detail::is_real_v<T>);
  const T a = T(alpha);
  detail::for_range(q, n, detail::grain, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) y[i] += a * x[i];
  });
}

// y = x (non-overlapping)
template <class T>
void copy(queue& q, std::size_t n, const T* x, T* y) {
  static_assert(std::is_trivially_copyable_v<T>);
  detail::for_range(q, n, detail::grain, [&](std::size_t b, std::size_t e) { std::copy(x + b, x + e, y + b); });
}

// x = value
template <class T>
void fill(queue& q, std::size_t n, T value, T* x) {
  static_assert(std::is_trivially_copyable_v<T>);
  detail::for_range(q, n, detail::grain, [&](std::size_t b, std::size_t e) { std::fill(x + b, x + e, value); });
}

// True iff no element is NaN or +-Inf (exponent-bit test: branch-free and
// immune to -ffast-math folding isfinite away).
template <class T>
bool all_finite(queue& q, std::size_t n, const T* x) {
  static_assert(detail::is_elem_v<T>);
  using U = std::conditional_t<sizeof(T) == 2, std::uint16_t,
                               std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>;
  constexpr U exp_mask = sizeof(T) == 2   ? U(0x7f80u)
                         : sizeof(T) == 4 ? U(0x7f800000u)
                                          : U(0x7ff0000000000000ull);
  if (n == 0) return true;
  const std::size_t chunks = (n + detail::grain - 1) / detail::grain;
  std::vector<unsigned char> bad(chunks, 0);
  q.parallel_for(chunks, [&](std::size_t c) {
    const std::size_t b = c * detail::grain, e = std::min(n, b + detail::grain);
    U hit = 0;
    for (std::size_t i = b; i < e; ++i) {
      const U bits = std::bit_cast<U>(x[i]) & exp_mask;
      hit |= U(bits == exp_mask);
    }
    bad[c] = hit != 0;
  });
  return std::none_of(bad.begin(), bad.end(), [](unsigned char v) { return v != 0; });
}
template <class T>
bool all_finite(std::size_t n, const T* x) {
  queue q(1);
  return all_finite(q, n, x);
}

// y[i] = To(x[i]): float/double -> bf16 rounds to nearest even, bf16 -> float is exact.
// Mixed precision uses it for the bf16 copies of the master parameters and to
// bring the batch into the compute type. y must not overlap x.
template <class From, class To>
void cast_elements(queue& q, std::size_t n, const From* x, To* y) {
  static_assert(detail::is_elem_v<From> && detail::is_elem_v<To>);
  if (n == 0) return;
  detail::need(x && y, "cast_elements", "null pointer");
  using C = std::conditional_t<std::is_same_v<From, double> || std::is_same_v<To, double>, double, float>;
  detail::for_range(q, n, detail::grain, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) {
      if constexpr (std::is_same_v<To, bf16>)
        y[i] = bf16(static_cast<float>(x[i]));  // a double rounds twice (via float); training casts float
      else
        y[i] = static_cast<To>(static_cast<C>(x[i]));
    }
  });
}

// ---------------------------------------------------------------------------
// Optimizers (one fused pass per tensor; PyTorch semantics and op order)
// ---------------------------------------------------------------------------

// torch.optim.SGD (dampening 0, no Nesterov):
//   g = grad + weight_decay * param
//   v = momentum * v + g ; g = v        (skipped when momentum == 0)
//   param -= lr * g
// velocity must start zeroed (PyTorch's first-step copy equals 0*mu + g) and
// may be null when momentum == 0. grad is not modified.
template <class T>
void sgd_momentum_step(queue& q, std::size_t n, double lr, double momentum, double weight_decay, T* param,
                       const T* grad, T* velocity) {
  static_assert(detail::is_real_v<T>);
  if (n == 0) return;
  detail::need(param && grad && (velocity || momentum == 0.0), "sgd_momentum_step", "null pointer");
  const T neg_lr = T(-lr), mu = T(momentum), wd = T(weight_decay);
  const bool use_wd = weight_decay != 0.0, use_mom = momentum != 0.0;
  detail::for_range(q, n, detail::grain, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) {
      T g = grad[i];
      if (use_wd) g = g + wd * param[i];
      if (use_mom) {
        velocity[i] = velocity[i] * mu + g;
        g = velocity[i];
      }
      param[i] = param[i] + neg_lr * g;
    }
  });
}

// torch.optim.Adam (decoupled == false) / AdamW (decoupled == true), step =
// number of this update, starting at 1; m, v start zeroed:
//   Adam:  g += weight_decay * param        AdamW: param *= 1 - lr * weight_decay
//   m = lerp(m, g, 1 - beta1)   v = beta2 * v + (1 - beta2) * g * g
//   param -= (lr / (1 - beta1^step)) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
// Bias corrections are computed in double, as PyTorch does on the host.
template <class T>
void adam_step(queue& q, std::size_t n, double lr, double beta1, double beta2, double eps, double weight_decay,
               std::int64_t step, T* param, const T* grad, T* m, T* v, bool decoupled) {
  static_assert(detail::is_real_v<T>);
  if (step < 1) detail::fail("adam_step", "step counts updates from 1");
  if (n == 0) return;
  detail::need(param && grad && m && v, "adam_step", "null pointer");
  const double bc1 = 1.0 - std::pow(beta1, double(step));
  const double bc2 = 1.0 - std::pow(beta2, double(step));
  const T neg_step_size = T(-(lr / bc1));
  const T bc2_sqrt = T(std::sqrt(bc2));
  const T w1 = T(1.0 - beta1), b2 = T(beta2), w2 = T(1.0 - beta2), e_ = T(eps);
  const T wd = T(weight_decay), decay = T(1.0 - lr * weight_decay);
  const bool use_wd = weight_decay != 0.0;
  const bool lerp_low = (1.0 - beta1) < 0.5;  // torch.lerp picks its formula by weight
  detail::for_range(q, n, detail::grain, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) {
      T p = param[i], g = grad[i];
      if (use_wd) {
        if (decoupled)
          p = p * decay;
        else
          g = g + wd * p;
      }
      const T mi = m[i];
      const T mn = lerp_low ? mi + w1 * (g - mi) : g - (g - mi) * (T(1) - w1);
      const T vn = v[i] * b2 + w2 * g * g;
      const T denom = std::sqrt(vn) / bc2_sqrt + e_;
      m[i] = mn;
      v[i] = vn;
      param[i] = p + neg_step_size * (mn / denom);
    }
  });
}

// ---------------------------------------------------------------------------
// Executor helpers: strided copies, ids carried as values, loss bookkeeping
// ---------------------------------------------------------------------------

// dst[r·ld_dst + c] = src[r·ld_src + c] for r < rows, c < cols.
template <class T>
void copy_2d(queue& q, std::size_t rows, std::size_t cols, const T* src, std::size_t ld_src, T* dst,
             std::size_t ld_dst) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (rows * cols == 0) return;
  detail::need(src && dst, "copy_2d", "null pointer");
  detail::for_range(q, rows, std::max<std::size_t>(1, detail::grain / std::max<std::size_t>(cols, 1)),
                    [&](std::size_t b, std::size_t e) {
                      for (std::size_t r = b; r < e; ++r) std::copy(src + r * ld_src, src + r * ld_src + cols, dst + r * ld_dst);
                    });
}

// Token ids travel through the model's input as values of T: ids[i] = (int32) values[i].
template <class T>
void cast_ids(queue& q, std::size_t n, const T* values, std::int32_t* ids) {
  static_assert(detail::is_real_v<T>);
  detail::for_range(q, n, detail::grain, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) {
      const T v = values[i];
      // NaN and values outside int32 become INT32_MIN (as on the device): never UB
      const bool fits = v > T(-2147483649.0) && v < T(2147483648.0);
      ids[i] = fits ? static_cast<std::int32_t>(v) : std::numeric_limits<std::int32_t>::min();
    }
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

// C = act(alpha * op(A) op(B) + beta * C + bias) with pre_out (may be null)
// receiving the pre-activation: the host form of the CUDA backend's fused
// cuBLASLt epilogue (bias length N may be null). T: float, double, bf16 (alpha
// and beta in float for bf16, whose product is rounded to bf16 before the bias,
// as the unfused CUDA path does).
template <class T>
  requires detail::is_elem_v<T>
void gemm_bias_act(queue& q, trans trans_a, trans trans_b, std::size_t M, std::size_t N, std::size_t K,
                   gemm_scalar_t<T> alpha, const T* A, std::size_t lda, const T* B, std::size_t ldb,
                   gemm_scalar_t<T> beta, T* C, std::size_t ldc, const T* bias, activation act, T* pre_out) {
  if (M == 0 || N == 0) return;
  if (pre_out == C && act != activation::none) detail::fail("gemm", "pre_out must not alias C when act != none");
  gemm(q, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (!bias && act == activation::none && !pre_out) return;
  detail::for_rows(q, M, N, [&](std::size_t r) {
    bias_activation_forward(q, act, 1, N, C + r * ldc, bias, pre_out ? pre_out + r * ldc : nullptr, C + r * ldc);
  });
}

}  // namespace strata::backend::host
