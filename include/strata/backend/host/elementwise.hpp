#pragma once
// strata host backend, elementwise kernels: the host implementation of
// backend/elementwise.hpp (the contracts and argument checks are there).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/backend/elementwise.hpp"
#include "strata/backend/host/launch.hpp"
#include "strata/core/math.hpp"

namespace strata::backend::host {

namespace detail {
// The float GeLU loops, one per CPU level (STRATA_HOST_CLONES): the largest elementwise
// cost of a transformer step on CPUs.
STRATA_HOST_CLONES inline void bias_gelu_row_f32(std::size_t cols, const float* x, const float* bias, float* pre,
                                                 float* y) {
  using backend::activation;
  if (bias && pre) {
    for (std::size_t j = 0; j < cols; ++j) {
      const float v = x[j] + bias[j];
      pre[j] = v;
      y[j] = math::act_forward(activation::gelu, v);
    }
  } else if (bias) {
    for (std::size_t j = 0; j < cols; ++j) y[j] = math::act_forward(activation::gelu, x[j] + bias[j]);
  } else if (pre) {
    for (std::size_t j = 0; j < cols; ++j) {
      const float v = x[j];
      pre[j] = v;
      y[j] = math::act_forward(activation::gelu, v);
    }
  } else {
    for (std::size_t j = 0; j < cols; ++j) y[j] = math::act_forward(activation::gelu, x[j]);
  }
}
STRATA_HOST_CLONES inline void gelu_backward_f32(std::size_t n, const float* pre, const float* dy, float* dx) {
  for (std::size_t i = 0; i < n; ++i) dx[i] = dy[i] * math::act_derivative(backend::activation::gelu, pre[i]);
}
}  // namespace detail

// Static members on arguments the front has checked (impl::elementwise_kernels<queue>).
struct elementwise_kernels {
  // The activation, and whether there is a bias and a pre-activation output, are template
  // arguments of the row loop: no branch is left in it, so it vectorises.
  template <class T>
  static void bias_activation_forward(queue& q, activation act, std::size_t rows, std::size_t cols, const T* x,
                                      const T* bias, T* pre_out, T* y) {
    using C = detail::compute_t<T>;
    auto run = [&](auto act_c, auto has_bias, auto has_pre) {
      detail::for_rows(q, rows, cols, [&](std::size_t r) {
        const T* xr = x + r * cols;
        T* yr = y + r * cols;
        T* pr = has_pre ? pre_out + r * cols : nullptr;
        for (std::size_t j = 0; j < cols; ++j) {
          C v = C(xr[j]);
          if constexpr (decltype(has_bias)::value) v += C(bias[j]);
          // pre_out holds the value the activation saw, rounded like y
          if constexpr (decltype(has_pre)::value) pr[j] = T(v);
          yr[j] = T(math::act_forward(decltype(act_c)::value, v));
        }
      });
    };
    auto with_act = [&](auto act_c) {
      using yes = std::true_type;
      using no = std::false_type;
      if (bias && pre_out) run(act_c, yes{}, yes{});
      else if (bias) run(act_c, yes{}, no{});
      else if (pre_out) run(act_c, no{}, yes{});
      else run(act_c, no{}, no{});
    };
    if constexpr (std::is_same_v<T, float>) {
      if (act == activation::gelu) {
        detail::for_rows(q, rows, cols, [&](std::size_t r) {
          detail::bias_gelu_row_f32(cols, x + r * cols, bias, pre_out ? pre_out + r * cols : nullptr, y + r * cols);
        });
        return;
      }
    }
    switch (act) {
      case activation::relu:
        return with_act(std::integral_constant<activation, activation::relu>{});
      case activation::gelu:
        return with_act(std::integral_constant<activation, activation::gelu>{});
      default:
        return with_act(std::integral_constant<activation, activation::none>{});
    }
  }

  template <class T>
  static void activation_backward(queue& q, activation act, std::size_t n, const T* pre, const T* dy, T* dx) {
    using C = detail::compute_t<T>;
    detail::for_range(q, n, detail::grain, [&](std::size_t b, std::size_t e) {
      if (act == activation::none) {
        for (std::size_t i = b; i < e; ++i) dx[i] = dy[i];
      } else if (act == activation::relu) {
        // dy is read whatever the sign, so the select has no branch and vectorises (a branch
        // on the sign mispredicts half the time: 10x slower, the largest elementwise cost of a
        // ResNet step)
        for (std::size_t i = b; i < e; ++i) {
          const T g = dy[i];
          dx[i] = C(pre[i]) > C(0) ? g : T(C(0));
        }
      } else if constexpr (std::is_same_v<T, float>) {
        detail::gelu_backward_f32(e - b, pre + b, dy + b, dx + b);
      } else {
        for (std::size_t i = b; i < e; ++i) dx[i] = T(C(dy[i]) * math::act_derivative(activation::gelu, C(pre[i])));
      }
    });
  }

  // One row key per row, one hash per element.
  template <class T>
  static void dropout(queue& q, const dropout_args& a, std::size_t rows, std::size_t cols, const T* x, T* y) {
    using C = detail::compute_t<T>;
    const std::uint64_t key = *a.key;
    const C s = C(a.scale);
    detail::for_rows(q, rows, cols, [&](std::size_t r) {
      const std::uint64_t rk = a.row_key(key, r);
      const T* xr = x + r * cols;
      T* yr = y + r * cols;
      for (std::size_t j = 0; j < cols; ++j) yr[j] = T(math::dropout_value(C(xr[j]), a.keep(rk, j), s));
    });
  }

  template <class T>
  static void scale(queue& q, std::size_t n, double alpha, T* x) {
    using C = detail::compute_t<T>;
    const C a = C(T(alpha));
    detail::for_range(q, n, detail::grain, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) x[i] = T(C(x[i]) * a);
    });
  }

  template <class T>
  static void axpy(queue& q, std::size_t n, double alpha, const T* x, T* y) {
    using C = detail::compute_t<T>;
    const C a = C(T(alpha));
    detail::for_range(q, n, detail::grain, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) y[i] = T(C(y[i]) + a * C(x[i]));
    });
  }

  template <class T>
  static void add(queue& q, std::size_t n, const T* a, const T* b, T* y) {
    using C = detail::compute_t<T>;
    detail::for_range(q, n, detail::grain, [&](std::size_t lo, std::size_t hi) {
      for (std::size_t i = lo; i < hi; ++i) y[i] = T(C(a[i]) + C(b[i]));
    });
  }

  template <class T, class F, class... X>
  static void map(queue& q, std::size_t n, F f, T* y, const X*... x) {
    detail::for_range(q, n, detail::grain, [&](std::size_t lo, std::size_t hi) {
      for (std::size_t i = lo; i < hi; ++i) y[i] = T(f(detail::compute_t<X>(x[i])...));
    });
  }

  template <class T>
  static void copy(queue& q, std::size_t n, const T* x, T* y) {
    detail::for_range(q, n, detail::grain, [&](std::size_t b, std::size_t e) { std::copy(x + b, x + e, y + b); });
  }

  template <class T>
  static void fill(queue& q, std::size_t n, T value, T* x) {
    detail::for_range(q, n, detail::grain, [&](std::size_t b, std::size_t e) { std::fill(x + b, x + e, value); });
  }

  template <class From, class To>
  static void cast_elements(queue& q, std::size_t n, const From* x, To* y) {
    using C = std::conditional_t<std::is_same_v<From, double> || std::is_same_v<To, double>, double, float>;
    detail::for_range(q, n, detail::grain, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) {
        if constexpr (is_half16_v<To>)
          y[i] = To(static_cast<float>(x[i]));  // a double rounds twice (via float); training casts float
        else
          y[i] = static_cast<To>(static_cast<C>(x[i]));
      }
    });
  }

  template <class T>
  static void copy_2d(queue& q, std::size_t rows, std::size_t cols, const T* src, std::size_t ld_src, T* dst,
                      std::size_t ld_dst) {
    detail::for_range(q, rows, std::max<std::size_t>(1, detail::grain / std::max<std::size_t>(cols, 1)),
                      [&](std::size_t b, std::size_t e) {
                        for (std::size_t r = b; r < e; ++r)
                          std::copy(src + r * ld_src, src + r * ld_src + cols, dst + r * ld_dst);
                      });
  }

  template <class T>
  static void cast_ids(queue& q, std::size_t n, const T* values, std::int32_t* ids) {
    detail::for_range(q, n, detail::grain, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) {
        const T v = values[i];
        const bool fits = v > T(-2147483649.0) && v < T(2147483648.0);
        ids[i] = fits ? static_cast<std::int32_t>(v) : std::numeric_limits<std::int32_t>::min();
      }
    });
  }
};

}  // namespace strata::backend::host

namespace strata::backend::impl {
template <>
struct elementwise_kernels<host::queue> : host::elementwise_kernels {};
}  // namespace strata::backend::impl
