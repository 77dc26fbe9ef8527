#pragma once
// strata host backend, convolution: the host implementation of backend/convolution.hpp.
// im2col copies each tap's C contiguous channels at once (NHWC keeps them adjacent);
// every backward gathers per input pixel (core/conv_math.hpp), one task per block of
// pixels, so results do not depend on the thread count. col2im and max pooling walk a
// pixel's window once for a block of channels, the channels innermost (contiguous,
// vectorised), each channel's terms taken in the scan order of core/conv_math.hpp's
// per-element formula: the same sums and the same winners, bit for bit. Float
// convolutions run on oneDNN when strata::dnnl is linked (host/dnnl_convolution.hpp);
// otherwise, and for double and bf16, as im2col and the gemm family (the front's).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "strata/backend/convolution.hpp"
#include "strata/backend/host/dnnl_convolution.hpp"
#include "strata/backend/host/launch.hpp"
#include "strata/core/conv_math.hpp"

namespace strata::backend::host {

struct convolution_kernels {
  // Channels one pass over a window serves (col2im, max pooling): their sums on the stack.
  static constexpr std::size_t channel_block = 256;

#if defined(STRATA_WITH_DNNL)
  template <class T>
  static constexpr bool native_conv2d = std::is_same_v<T, float>;

  static bool conv2d_forward(queue& q, std::size_t samples, const conv_geometry& g, std::size_t out_c,
                             const float* x, const float* w, const float* bias, float* y, float* /*work*/) {
    detail::dnnl_conv::forward(q, samples, g, out_c, x, w, bias, y);
    return true;
  }
  static bool conv2d_backward_data(queue& q, std::size_t samples, const conv_geometry& g, std::size_t out_c,
                                   const float* dy, const float* w, float* dx, float* /*work*/) {
    detail::dnnl_conv::backward_data(q, samples, g, out_c, dy, w, dx);
    return true;
  }
  static bool conv2d_backward_weights(queue& q, std::size_t samples, const conv_geometry& g, std::size_t out_c,
                                      const float* x, const float* dy, float* dw, float* /*work*/) {
    detail::dnnl_conv::backward_weights(q, samples, g, out_c, x, dy, dw);
    return true;
  }
#else
  template <class T>
  static constexpr bool native_conv2d = false;
#endif

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
      // math::conv::col2im_value for channels [c0, c0 + n)
      const math::conv::span sh = math::conv::covering(h, g.KH, g.stride, g.pad, g.OH);
      const math::conv::span sw = math::conv::covering(w, g.KW, g.stride, g.pad, g.OW);
      for (std::size_t c0 = 0; c0 < C; c0 += channel_block) {
        const std::size_t n = std::min(channel_block, C - c0);
        A s[channel_block];
        for (std::size_t j = 0; j < n; ++j) s[j] = A(0);
        for (int oh = sh.lo; oh < sh.hi; ++oh) {
          const int kh = h + g.pad - oh * g.stride;
          for (int ow = sw.lo; ow < sw.hi; ++ow) {
            const int kw = w + g.pad - ow * g.stride;
            const T* d = ds + (std::size_t(oh) * std::size_t(g.OW) + std::size_t(ow)) * g.patch() +
                         (std::size_t(kh) * std::size_t(g.KW) + std::size_t(kw)) * C + c0;
            for (std::size_t j = 0; j < n; ++j) s[j] += A(d[j]);
          }
        }
        for (std::size_t j = 0; j < n; ++j) dx[r * C + c0 + j] = T(s[j]);
      }
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
      // math::conv::max_window for channels [c0, c0 + n): the same walk, the same rule
      for (std::size_t c0 = 0; c0 < C; c0 += channel_block) {
        const std::size_t n = std::min(channel_block, C - c0);
        A best[channel_block];
        int at[channel_block];
        for (std::size_t j = 0; j < n; ++j) {
          best[j] = A(0);
          at[j] = -1;
        }
        math::conv::for_window(g, oh, ow, [&](int h, int w) {
          const int me = h * g.W + w;
          const T* px = xs + std::size_t(me) * C + c0;
          for (std::size_t j = 0; j < n; ++j) {
            const A v = A(px[j]);
            const bool take = math::conv::max_takes(v, best[j], at[j] >= 0);
            best[j] = take ? v : best[j];
            at[j] = take ? me : at[j];
          }
        });
        for (std::size_t j = 0; j < n; ++j) y[r * C + c0 + j] = T(best[j]);
        if (arg)
          for (std::size_t j = 0; j < n; ++j) arg[r * C + c0 + j] = at[j];
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
      // math::conv::max_window_grad for channels [c0, c0 + n): the windows in the same order
      const math::conv::span sh = math::conv::covering(h, g.KH, g.stride, g.pad, g.OH);
      const math::conv::span sw = math::conv::covering(w, g.KW, g.stride, g.pad, g.OW);
      const int me = h * g.W + w;
      for (std::size_t c0 = 0; c0 < C; c0 += channel_block) {
        const std::size_t n = std::min(channel_block, C - c0);
        A sum[channel_block];
        for (std::size_t j = 0; j < n; ++j) sum[j] = A(0);
        for (int oh = sh.lo; oh < sh.hi; ++oh)
          for (int ow = sw.lo; ow < sw.hi; ++ow) {
            const std::size_t o = s * on + (std::size_t(oh) * std::size_t(g.OW) + std::size_t(ow)) * C + c0;
            for (std::size_t j = 0; j < n; ++j)
              if (int(arg[o + j]) == me) sum[j] += A(dy[o + j]);
          }
        for (std::size_t j = 0; j < n; ++j) dx[r * C + c0 + j] = T(sum[j]);
      }
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
