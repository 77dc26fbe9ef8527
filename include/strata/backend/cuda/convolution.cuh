// strata-header: cuda-only
#pragma once
// strata CUDA backend, convolution: the CUDA implementation of backend/convolution.hpp.
// One thread per output element (grid-stride loops, shapes from launch.cuh), each
// element's value from the per-element formulas of core/conv_math.hpp, as the host's:
// im2col copies (bit-identical to the host), every backward is a gather over the windows
// covering the pixel, so there are no atomics and results do not depend on the launch.
// Built with strata::cudnn, convolutions themselves are cuDNN's (cuda/cudnn_convolution.cuh).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "strata/backend/convolution.hpp"
#include "strata/backend/cuda/cudnn_convolution.cuh"
#include "strata/backend/cuda/device.cuh"
#include "strata/backend/cuda/elementwise.cuh"
#include "strata/core/conv_math.hpp"

namespace strata::backend::cuda {

namespace detail {

// Flat index i over [samples, pixels, inner] -> (sample, pixel, j); 32-bit divisions when
// the whole index space fits (see d_div).
struct nhwc_index {
  std::size_t s, p, j;
};
__device__ __forceinline__ nhwc_index split_index(std::size_t i, std::size_t pixels, std::size_t inner, bool small) {
  const std::size_t r = d_div(i, inner, small), s = d_div(r, pixels, small);
  return {s, r - s * pixels, i - r * inner};
}

// f(i, (sample, pixel, j)) for every flat index of [samples, pixels, inner], grid-stride.
template <class F>
__device__ __forceinline__ void for_each_nhwc(std::size_t samples, std::size_t pixels, std::size_t inner, F&& f) {
  const std::size_t n = samples * pixels * inner;
  const bool small = n <= 0xffffffffull;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    f(i, split_index(i, pixels, inner, small));
}

// cols[(s·op + p)·P + col] = im2col_value of sample s.
template <class T>
__global__ void k_im2col(std::size_t samples, conv_geometry g, const T* x, T* cols) {
  const std::size_t P = g.patch(), op = g.out_pixels(), ix = g.in_pixels() * std::size_t(g.C);
  for_each_nhwc(samples, op, P, [&](std::size_t i, nhwc_index k) {
    cols[i] = math::conv::im2col_value(g, x + k.s * ix, k.p, k.j);
  });
}

// dx[(s·ip + h·W + w)·C + c] = col2im_value of sample s's rows of dcols.
template <class T>
__global__ void k_col2im(std::size_t samples, conv_geometry g, const T* dcols, T* dx) {
  using A = compute_t<T>;
  const std::size_t C = std::size_t(g.C), ip = g.in_pixels(), oc = g.out_pixels() * g.patch();
  for_each_nhwc(samples, ip, C, [&](std::size_t i, nhwc_index k) {
    const int h = int(k.p / std::size_t(g.W)), w = int(k.p % std::size_t(g.W));
    dx[i] = T(math::conv::col2im_value<A>(g, dcols + k.s * oc, h, w, int(k.j)));
  });
}

// y (and arg, when given) at output pixel (oh, ow), channel c.
template <class T>
__global__ void k_maxpool_forward(std::size_t samples, conv_geometry g, const T* x, T* y, std::int32_t* arg) {
  using A = compute_t<T>;
  const std::size_t C = std::size_t(g.C), op = g.out_pixels(), ix = g.in_pixels() * C;
  for_each_nhwc(samples, op, C, [&](std::size_t i, nhwc_index k) {
    const int oh = int(k.p / std::size_t(g.OW)), ow = int(k.p % std::size_t(g.OW));
    int a = 0;
    y[i] = T(math::conv::max_window<A>(g, x + k.s * ix, oh, ow, int(k.j), a));
    if (arg) arg[i] = a;
  });
}

template <class T>
__global__ void k_maxpool_backward(std::size_t samples, conv_geometry g, const T* dy, const std::int32_t* arg, T* dx) {
  using A = compute_t<T>;
  const std::size_t C = std::size_t(g.C), ip = g.in_pixels(), on = g.out_pixels() * C;
  for_each_nhwc(samples, ip, C, [&](std::size_t i, nhwc_index k) {
    const int h = int(k.p / std::size_t(g.W)), w = int(k.p % std::size_t(g.W));
    dx[i] = T(math::conv::max_window_grad<A>(g, dy + k.s * on, arg + k.s * on, h, w, int(k.j)));
  });
}

template <class T>
__global__ void k_avgpool_forward(std::size_t samples, conv_geometry g, const T* x, T* y) {
  using A = compute_t<T>;
  const std::size_t C = std::size_t(g.C), op = g.out_pixels(), ix = g.in_pixels() * C;
  for_each_nhwc(samples, op, C, [&](std::size_t i, nhwc_index k) {
    const int oh = int(k.p / std::size_t(g.OW)), ow = int(k.p % std::size_t(g.OW));
    y[i] = T(math::conv::mean_window<A>(g, x + k.s * ix, oh, ow, int(k.j)));
  });
}

template <class T>
__global__ void k_avgpool_backward(std::size_t samples, conv_geometry g, const T* dy, T* dx) {
  using A = compute_t<T>;
  const std::size_t C = std::size_t(g.C), ip = g.in_pixels(), on = g.out_pixels() * C;
  for_each_nhwc(samples, ip, C, [&](std::size_t i, nhwc_index k) {
    const int h = int(k.p / std::size_t(g.W)), w = int(k.p % std::size_t(g.W));
    dx[i] = T(math::conv::mean_window_grad<A>(g, dy + k.s * on, h, w, int(k.j)));
  });
}

}  // namespace detail

// Static members on arguments the front has checked (impl::convolution_kernels<queue>).
struct convolution_kernels {
#if defined(STRATA_WITH_CUDNN)
  // Convolutions on cuDNN (cuda/cudnn_convolution.cuh) where it serves the problem (false:
  // the front runs im2col and cuBLASLt); double, and a bf16 / f16 filter gradient into float
  // master gradients, always take the front's composition.
  template <class T>
  static constexpr bool native_conv2d = std::is_same_v<T, float> || is_half16_v<T>;

  template <class T>
  static bool conv2d_forward(queue& q, std::size_t samples, const conv_geometry& g, std::size_t out_c, const T* x,
                             const T* w, const T* bias, T* y, T* work) {
    if (!detail::cudnn_conv::runner::of_this_thread().forward(q, samples, g, out_c, x, w, y, work,
                                                               work_bytes<T>(samples, g)))
      return false;
    if (bias)
      bias_activation_forward(q, activation::none, samples * g.out_pixels(), out_c, static_cast<const T*>(y), bias,
                              static_cast<T*>(nullptr), y);
    return true;
  }
  template <class T>
  static bool conv2d_backward_data(queue& q, std::size_t samples, const conv_geometry& g, std::size_t out_c,
                                   const T* dy, const T* w, T* dx, T* work) {
    return detail::cudnn_conv::runner::of_this_thread().backward_data(q, samples, g, out_c, dy, w, dx, work,
                                                                       work_bytes<T>(samples, g));
  }
  template <class T>
  static bool conv2d_backward_weights(queue& q, std::size_t samples, const conv_geometry& g, std::size_t out_c,
                                      const T* x, const T* dy, T* dw, T* work) {
    return detail::cudnn_conv::runner::of_this_thread().backward_weights(q, samples, g, out_c, x, dy, dw, work,
                                                                          work_bytes<T>(samples, g));
  }
  template <class T>
  static std::size_t work_bytes(std::size_t samples, const conv_geometry& g) {
    return conv2d_work_values(samples, g) * sizeof(T);
  }
#else
  // Convolutions run as im2col and cuBLASLt GEMMs (the front's composition).
  template <class T>
  static constexpr bool native_conv2d = false;
#endif

  template <class T>
  static void im2col(queue& q, std::size_t samples, const conv_geometry& g, const T* x, T* cols) {
    const std::size_t n = samples * g.out_pixels() * g.patch();
    detail::k_im2col<T><<<detail::flat_grid(q, n), detail::flat_threads, 0, q.stream()>>>(samples, g, x, cols);
    STRATA_CUDA_CHECK_LAUNCH("k_im2col");
  }

  template <class T>
  static void col2im(queue& q, std::size_t samples, const conv_geometry& g, const T* dcols, T* dx) {
    const std::size_t n = samples * g.in_pixels() * std::size_t(g.C);
    detail::k_col2im<T><<<detail::flat_grid(q, n), detail::flat_threads, 0, q.stream()>>>(samples, g, dcols, dx);
    STRATA_CUDA_CHECK_LAUNCH("k_col2im");
  }

  template <class T>
  static void maxpool_forward(queue& q, std::size_t samples, const conv_geometry& g, const T* x, T* y,
                              std::int32_t* arg) {
    const std::size_t n = samples * g.out_pixels() * std::size_t(g.C);
    detail::k_maxpool_forward<T><<<detail::flat_grid(q, n), detail::flat_threads, 0, q.stream()>>>(samples, g, x, y,
                                                                                                 arg);
    STRATA_CUDA_CHECK_LAUNCH("k_maxpool_forward");
  }

  template <class T>
  static void maxpool_backward(queue& q, std::size_t samples, const conv_geometry& g, const T* dy,
                               const std::int32_t* arg, T* dx) {
    const std::size_t n = samples * g.in_pixels() * std::size_t(g.C);
    detail::k_maxpool_backward<T><<<detail::flat_grid(q, n), detail::flat_threads, 0, q.stream()>>>(samples, g, dy,
                                                                                                  arg, dx);
    STRATA_CUDA_CHECK_LAUNCH("k_maxpool_backward");
  }

  template <class T>
  static void avgpool_forward(queue& q, std::size_t samples, const conv_geometry& g, const T* x, T* y) {
    const std::size_t n = samples * g.out_pixels() * std::size_t(g.C);
    detail::k_avgpool_forward<T><<<detail::flat_grid(q, n), detail::flat_threads, 0, q.stream()>>>(samples, g, x, y);
    STRATA_CUDA_CHECK_LAUNCH("k_avgpool_forward");
  }

  template <class T>
  static void avgpool_backward(queue& q, std::size_t samples, const conv_geometry& g, const T* dy, T* dx) {
    const std::size_t n = samples * g.in_pixels() * std::size_t(g.C);
    detail::k_avgpool_backward<T><<<detail::flat_grid(q, n), detail::flat_threads, 0, q.stream()>>>(samples, g, dy,
                                                                                                  dx);
    STRATA_CUDA_CHECK_LAUNCH("k_avgpool_backward");
  }
};

}  // namespace strata::backend::cuda

namespace strata::backend::impl {
template <>
struct convolution_kernels<cuda::queue> : cuda::convolution_kernels {};
}  // namespace strata::backend::impl
