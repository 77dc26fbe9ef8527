#pragma once
// strata host backend, convolution: the host implementation of backend/convolution.hpp.
// im2col copies each tap's C contiguous channels at once (NHWC keeps them adjacent);
// every backward gathers per input pixel (core/conv_math.hpp), one task per block of
// pixels, so results do not depend on the thread count.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "strata/backend/convolution.hpp"
#include "strata/backend/host/launch.hpp"
#include "strata/core/conv_math.hpp"

namespace strata::backend::host {

struct convolution_kernels {
  template <class T>
  static void im2col(queue& q, std::size_t samples, const conv_geometry& g, const T* x, T* cols) {
    const std::size_t P = g.patch(), C = std::size_t(g.C), op = g.out_pixels();
    detail::for_rows(q, samples * op, P, [&](std::size_t r) {
      const T* xs = x + (r / op) * g.in_pixels() * C;
      const int oh = int((r % op) / std::size_t(g.OW)), ow = int((r % op) % std::size_t(g.OW));
      T* out = cols + r * P;
      for (int kh = 0; kh < g.KH; ++kh) {
        const int h = oh * g.stride - g.pad + kh;
        for (int kw = 0; kw < g.KW; ++kw, out += C) {
          const int w = ow * g.stride - g.pad + kw;
          if (h < 0 || h >= g.H || w < 0 || w >= g.W) std::fill(out, out + C, T(0));
          else std::memcpy(out, xs + (std::size_t(h) * std::size_t(g.W) + std::size_t(w)) * C, C * sizeof(T));
        }
      }
    });
  }

  template <class T>
  static void col2im(queue& q, std::size_t samples, const conv_geometry& g, const T* dcols, T* dx) {
    using A = detail::compute_t<T>;
    const std::size_t C = std::size_t(g.C), ip = g.in_pixels();
    detail::for_rows(q, samples * ip, C * g.taps(), [&](std::size_t r) {
      const T* ds = dcols + (r / ip) * g.out_pixels() * g.patch();
      const int h = int((r % ip) / std::size_t(g.W)), w = int((r % ip) % std::size_t(g.W));
      for (std::size_t c = 0; c < C; ++c) dx[r * C + c] = T(math::conv::col2im_value<A>(g, ds, h, w, int(c)));
    });
  }

  template <class T>
  static void maxpool_forward(queue& q, std::size_t samples, const conv_geometry& g, const T* x, T* y,
                              std::int32_t* arg) {
    using A = detail::compute_t<T>;
    const std::size_t C = std::size_t(g.C), op = g.out_pixels();
    detail::for_rows(q, samples * op, C * g.taps(), [&](std::size_t r) {
      const T* xs = x + (r / op) * g.in_pixels() * C;
      const int oh = int((r % op) / std::size_t(g.OW)), ow = int((r % op) % std::size_t(g.OW));
      for (std::size_t c = 0; c < C; ++c) {
        int a = 0;
        y[r * C + c] = T(math::conv::max_window<A>(g, xs, oh, ow, int(c), a));
        if (arg) arg[r * C + c] = a;
      }
    });
  }

  template <class T>
  static void maxpool_backward(queue& q, std::size_t samples, const conv_geometry& g, const T* dy,
                               const std::int32_t* arg, T* dx) {
    using A = detail::compute_t<T>;
    const std::size_t C = std::size_t(g.C), ip = g.in_pixels(), on = g.out_pixels() * C;
    detail::for_rows(q, samples * ip, C * g.taps(), [&](std::size_t r) {
      const std::size_t s = r / ip;
      const int h = int((r % ip) / std::size_t(g.W)), w = int((r % ip) % std::size_t(g.W));
      for (std::size_t c = 0; c < C; ++c)
        dx[r * C + c] = T(math::conv::max_window_grad<A>(g, dy + s * on, arg + s * on, h, w, int(c)));
    });
  }

  template <class T>
  static void avgpool_forward(queue& q, std::size_t samples, const conv_geometry& g, const T* x, T* y) {
    using A = detail::compute_t<T>;
    const std::size_t C = std::size_t(g.C), op = g.out_pixels();
    detail::for_rows(q, samples * op, C * g.taps(), [&](std::size_t r) {
      const T* xs = x + (r / op) * g.in_pixels() * C;
      const int oh = int((r % op) / std::size_t(g.OW)), ow = int((r % op) % std::size_t(g.OW));
      for (std::size_t c = 0; c < C; ++c) y[r * C + c] = T(math::conv::mean_window<A>(g, xs, oh, ow, int(c)));
    });
  }

  template <class T>
  static void avgpool_backward(queue& q, std::size_t samples, const conv_geometry& g, const T* dy, T* dx) {
    using A = detail::compute_t<T>;
    const std::size_t C = std::size_t(g.C), ip = g.in_pixels(), on = g.out_pixels() * C;
    detail::for_rows(q, samples * ip, C * g.taps(), [&](std::size_t r) {
      const std::size_t s = r / ip;
      const int h = int((r % ip) / std::size_t(g.W)), w = int((r % ip) % std::size_t(g.W));
      for (std::size_t c = 0; c < C; ++c)
        dx[r * C + c] = T(math::conv::mean_window_grad<A>(g, dy + s * on, h, w, int(c)));
    });
  }
};

}  // namespace strata::backend::host

namespace strata::backend::impl {
template <>
struct convolution_kernels<host::queue> : host::convolution_kernels {};
}  // namespace strata::backend::impl
