// strata-header: cuda-only
#pragma once
// strata CUDA backend, softmax cross-entropy: the CUDA implementation of
// backend/softmax.hpp (one thread group per row; labels out of range reported through
// the queue's error word, see device.cuh).
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "strata/backend/cuda/device.cuh"
#include "strata/backend/softmax.hpp"

namespace strata::backend::cuda {

// ---------------------------------------------------------------------------
// Softmax cross-entropy
// ---------------------------------------------------------------------------

namespace detail {

// T: logits / probs (float, double, bf16, f16), computed in C = compute_t<T>;
// S: the loss (float or double).
template <class T, class S, int TH, int IT, int RPB>
__global__ void __launch_bounds__(TH* RPB)
    k_softmax_xent_forward(std::size_t rows, std::size_t cols, const T* logits, const std::int32_t* labels, S* loss,
                           T* probs, device_status* st) {
  using C = compute_t<T>;
  __shared__ double sd[RPB][TH / 32];
  __shared__ C sm[RPB][TH / 32];
  const int g = int(threadIdx.x) / TH, t = int(threadIdx.x) % TH;
  const std::size_t r = std::size_t(blockIdx.x) * RPB + g;
  const bool active = r < rows;
  const T* x = logits + (active ? r : 0) * cols;
  constexpr int NC = IT > 0 ? IT : 1;
  C v[NC];
  C m = d_neg_inf<C>();
  if constexpr (IT > 0) {
#pragma unroll
    for (int k = 0; k < IT; ++k) {
      const std::size_t j = std::size_t(t) + std::size_t(k) * TH;
      v[k] = (active && j < cols) ? C(x[j]) : d_neg_inf<C>();
      m = v[k] > m ? v[k] : m;
    }
  } else if (active) {
    for (std::size_t j = t; j < cols; j += TH) {
      const C xj = C(x[j]);
      m = xj > m ? xj : m;
    }
  }
  m = group<TH>::max(m, sm[g]);
  double s = 0;
  if constexpr (IT > 0) {
#pragma unroll
    for (int k = 0; k < IT; ++k)
      if (active && std::size_t(t) + std::size_t(k) * TH < cols) s += double(d_exp(v[k] - m));
  } else if (active) {
    for (std::size_t j = t; j < cols; j += TH) s += double(d_exp(C(x[j]) - m));
  }
  s = group<TH>::sum(s, sd[g]);
  if (!active) return;  // no barriers below
  const std::int32_t l = labels[r];
  const bool ok = l >= 0 && std::size_t(l) < cols;
  if (t == 0) {
    if (ok) {
      // log(s) >= 0 and x[l] - m <= 0: no cancellation between large terms.
      loss[r] = S(log(s) - double(C(x[l]) - m));
    } else if (l == ignore_label) {
      loss[r] = S(0);
    } else {
      loss[r] = d_nan<S>();
      report_label(st, kc_softmax_forward, r, l, 0, static_cast<long long>(cols));
    }
  }
  if (probs) {
    T* p = probs + r * cols;
    const C inv = C(1.0 / s);
    if constexpr (IT > 0) {
#pragma unroll
      for (int k = 0; k < IT; ++k) {
        const std::size_t j = std::size_t(t) + std::size_t(k) * TH;
        if (j < cols) p[j] = T(d_exp(v[k] - m) * inv);
      }
    } else {
      for (std::size_t j = t; j < cols; j += TH) p[j] = T(d_exp(C(x[j]) - m) * inv);
    }
  }
}

// Both elementwise backward kernels: d[r, j] = s * (p_j - [j == label]), with
// p either given (softmax backward) or recomputed from logits and the
// all-reduced row statistics (vocabulary-parallel backward). T: src and d
// (computed in C = compute_t<T>); S: row_max / sum_exp.
template <class T, class S, int W, bool FromLogits>
__global__ void k_xent_backward(std::size_t rows, std::size_t cols, const T* src, const std::int32_t* labels,
                                std::size_t col_offset, const S* row_max, const S* sum_exp, compute_t<T> s, T* d,
                                device_status* st) {
  using C = compute_t<T>;
  const std::size_t n = rows * cols;
  const bool small = n <= 0xffffffffull;
  flat_loop<W>(n, [&](std::size_t i, auto w) {
    constexpr int V = decltype(w)::value;
    // A vector never straddles rows (cols % W == 0 when W > 1).
    const std::size_t r = d_div(i, cols, small), j0 = i - r * cols;
    const std::int32_t l = labels[r];
    T in[V], out[V];
    load<V>(src + i, in);
    bool bad;
    std::size_t lj = ~std::size_t(0);  // label column within this slice, if any
    const bool ignored = l == ignore_label;
    if (ignored) {
      bad = false;
    } else if constexpr (FromLogits) {
      bad = l < 0;
      if (!bad && std::size_t(l) >= col_offset && std::size_t(l) - col_offset < cols) lj = std::size_t(l) - col_offset;
    } else {
      bad = l < 0 || std::size_t(l) >= cols;
      if (!bad) lj = std::size_t(l);
    }
    if (bad) {
#pragma unroll
      for (int k = 0; k < V; ++k) out[k] = d_nan<T>();
      if (j0 == 0)
        report_label(st, FromLogits ? kc_xent_local_backward : kc_softmax_backward, r, l, 0,
                     FromLogits ? static_cast<long long>(INT32_MAX) : static_cast<long long>(cols));
    } else {
      C m = C(0), inv = C(0);
      if constexpr (FromLogits) {
        m = C(row_max[r]);
        inv = C(1.0 / double(sum_exp[r]));
      }
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const C p = FromLogits ? d_exp(C(in[k]) - m) * inv : C(in[k]);
        out[k] = ignored ? d_zero<T>() : T(j0 + k == lj ? s * (p - C(1)) : s * p);
      }
    }
    store<V>(d + i, out);
  });
}

template <class T, class S, bool FromLogits>
void xent_backward_launch(queue& q, std::size_t rows, std::size_t cols, const T* src, const std::int32_t* labels,
                          std::size_t col_offset, const S* row_max, const S* sum_exp, compute_t<T> s, T* d) {
  constexpr int W = vec_width<T>;
  const std::size_t n = rows * cols;
  if (cols % W == 0 && aligned16(src) && aligned16(d))
    k_xent_backward<T, S, W, FromLogits><<<flat_grid(q, n / W), flat_threads, 0, q.stream()>>>(
        rows, cols, src, labels, col_offset, row_max, sum_exp, s, d, status_word(q));
  else
    k_xent_backward<T, S, 1, FromLogits><<<flat_grid(q, n), flat_threads, 0, q.stream()>>>(
        rows, cols, src, labels, col_offset, row_max, sum_exp, s, d, status_word(q));
  STRATA_CUDA_CHECK_LAUNCH("k_xent_backward");
}

template <class T, class S, int TH, int RPB>
__global__ void __launch_bounds__(TH* RPB)
    k_xent_local_max(std::size_t rows, std::size_t cols, const T* logits, S* row_max) {
  using C = compute_t<T>;
  __shared__ C sm[RPB][TH / 32];
  const int g = int(threadIdx.x) / TH, t = int(threadIdx.x) % TH;
  const std::size_t r = std::size_t(blockIdx.x) * RPB + g;
  const bool active = r < rows;
  C m = d_neg_inf<C>();
  if (active)
    for (std::size_t j = t; j < cols; j += TH) {
      const C v = C(logits[r * cols + j]);
      m = v > m ? v : m;
    }
  m = group<TH>::max(m, sm[g]);
  if (active && t == 0) row_max[r] = S(m);
}

template <class T, class S, int TH, int RPB>
__global__ void __launch_bounds__(TH* RPB)
    k_xent_local_sumexp(std::size_t rows, std::size_t cols, const T* logits, const S* row_max, S* sum_exp) {
  using C = compute_t<T>;
  __shared__ double sd[RPB][TH / 32];
  const int g = int(threadIdx.x) / TH, t = int(threadIdx.x) % TH;
  const std::size_t r = std::size_t(blockIdx.x) * RPB + g;
  const bool active = r < rows;
  double s = 0;
  if (active) {
    const C m = C(row_max[r]);
    for (std::size_t j = t; j < cols; j += TH) s += double(d_exp(C(logits[r * cols + j]) - m));
  }
  s = group<TH>::sum(s, sd[g]);
  if (active && t == 0) sum_exp[r] = S(s);
}

template <class T, class S>
__global__ void k_xent_target_logit(std::size_t rows, std::size_t cols, const T* logits, const std::int32_t* labels,
                                    std::size_t col_offset, S* target, device_status* st) {
  using C = compute_t<T>;
  for (std::size_t r = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; r < rows;
       r += std::size_t(gridDim.x) * blockDim.x) {
    const std::int32_t l = labels[r];
    if (l == ignore_label) {
      target[r] = S(0);
      continue;
    }
    if (l < 0) {
      target[r] = d_nan<S>();
      report_label(st, kc_xent_target_logit, r, l, 0, INT32_MAX);
      continue;
    }
    const std::size_t lu = std::size_t(l);
    target[r] = (lu >= col_offset && lu - col_offset < cols) ? S(C(logits[r * cols + (lu - col_offset)])) : S(0);
  }
}

template <class T>
__global__ void k_xent_loss(std::size_t rows, const T* row_max, const T* sum_exp, const T* target, T* loss) {
  for (std::size_t r = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; r < rows;
       r += std::size_t(gridDim.x) * blockDim.x)
    loss[r] = T(log(double(sum_exp[r])) - (double(target[r]) - double(row_max[r])));
}


template <class T>
__global__ void __launch_bounds__(256)
    k_loss_accumulate(std::size_t n, const std::int32_t* labels, const T* loss, const T* target, const T* row_max,
                      double* acc) {
  __shared__ double sm[3][256 / 32];
  double s = 0, c = 0, k = 0;
  for (std::size_t r = threadIdx.x; r < n; r += blockDim.x) {
    if (labels[r] == ignore_label) continue;
    s += double(loss[r]);
    c += target[r] >= row_max[r] ? 1.0 : 0.0;
    k += 1.0;
  }
  s = group<256>::sum(s, sm[0]);
  c = group<256>::sum(c, sm[1]);
  k = group<256>::sum(k, sm[2]);
  if (threadIdx.x == 0) {
    acc[0] += s;
    acc[1] += c;
    acc[2] += k;
  }
}
}  // namespace detail

// Static members on arguments the front has checked (impl::softmax_kernels<queue>).
struct softmax_kernels {
  template <class T, class S>
  static void softmax_cross_entropy_forward(queue& q, std::size_t rows, std::size_t cols, const T* logits,
                                            const std::int32_t* labels, S* loss_per_row, T* probs_out) {
    detail::with_row_config(cols, [&](auto th, auto it, auto rpb) {
      constexpr int TH = decltype(th)::value, IT = decltype(it)::value, RPB = decltype(rpb)::value;
      const unsigned blocks = static_cast<unsigned>((rows + RPB - 1) / RPB);
      detail::k_softmax_xent_forward<T, S, TH, IT, RPB><<<blocks, TH * RPB, 0, q.stream()>>>(
          rows, cols, logits, labels, loss_per_row, probs_out, detail::status_word(q));
    });
    STRATA_CUDA_CHECK_LAUNCH("k_softmax_xent_forward");
  }

  template <class T>
  static void softmax_cross_entropy_backward(queue& q, std::size_t rows, std::size_t cols, const T* probs,
                                             const std::int32_t* labels, double scale, T* dlogits) {
    using C = detail::compute_t<T>;
    detail::xent_backward_launch<T, C, false>(q, rows, cols, probs, labels, 0, static_cast<const C*>(nullptr),
                                              static_cast<const C*>(nullptr), C(scale), dlogits);
  }

  template <class T, class S>
  static void xent_local_max(queue& q, std::size_t rows, std::size_t cols, const T* logits, S* row_max) {
    detail::with_row_threads(cols, [&](auto th, auto rpb) {
      constexpr int TH = decltype(th)::value, RPB = decltype(rpb)::value;
      detail::k_xent_local_max<T, S, TH, RPB>
          <<<static_cast<unsigned>((rows + RPB - 1) / RPB), TH * RPB, 0, q.stream()>>>(rows, cols, logits, row_max);
    });
    STRATA_CUDA_CHECK_LAUNCH("k_xent_local_max");
  }

  template <class T, class S>
  static void xent_local_sumexp(queue& q, std::size_t rows, std::size_t cols, const T* logits, const S* row_max,
                                S* sum_exp) {
    detail::with_row_threads(cols, [&](auto th, auto rpb) {
      constexpr int TH = decltype(th)::value, RPB = decltype(rpb)::value;
      detail::k_xent_local_sumexp<T, S, TH, RPB><<<static_cast<unsigned>((rows + RPB - 1) / RPB), TH * RPB, 0,
                                                   q.stream()>>>(rows, cols, logits, row_max, sum_exp);
    });
    STRATA_CUDA_CHECK_LAUNCH("k_xent_local_sumexp");
  }

  template <class T, class S>
  static void xent_target_logit(queue& q, std::size_t rows, std::size_t cols, const T* logits,
                                const std::int32_t* labels, std::size_t col_offset, S* target) {
    detail::k_xent_target_logit<T, S><<<detail::flat_grid(q, rows), detail::flat_threads, 0, q.stream()>>>(
        rows, cols, logits, labels, col_offset, target, detail::status_word(q));
    STRATA_CUDA_CHECK_LAUNCH("k_xent_target_logit");
  }

  template <class S>
  static void xent_loss(queue& q, std::size_t rows, const S* row_max, const S* sum_exp, const S* target, S* loss) {
    detail::k_xent_loss<S>
        <<<detail::flat_grid(q, rows), detail::flat_threads, 0, q.stream()>>>(rows, row_max, sum_exp, target, loss);
    STRATA_CUDA_CHECK_LAUNCH("k_xent_loss");
  }

  template <class T, class S>
  static void xent_local_backward(queue& q, std::size_t rows, std::size_t cols, const T* logits,
                                  const std::int32_t* labels, std::size_t col_offset, const S* row_max,
                                  const S* sum_exp, double scale, T* dlogits) {
    detail::xent_backward_launch<T, S, true>(q, rows, cols, logits, labels, col_offset, row_max, sum_exp,
                                             detail::compute_t<T>(scale), dlogits);
  }

  // One block, a fixed reduction order: deterministic.
  template <class S>
  static void loss_accumulate(queue& q, std::size_t n, const std::int32_t* labels, const S* loss, const S* target,
                              const S* row_max, double* acc) {
    detail::k_loss_accumulate<S><<<1, 256, 0, q.stream()>>>(n, labels, loss, target, row_max, acc);
    STRATA_CUDA_CHECK_LAUNCH("k_loss_accumulate");
  }
};

}  // namespace strata::backend::cuda

namespace strata::backend::impl {
template <>
struct softmax_kernels<cuda::queue> : cuda::softmax_kernels {};
}  // namespace strata::backend::impl
