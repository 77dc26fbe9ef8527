#pragma once
// The convolution kernel family's front (dispatch.hpp): the im2col patch matrix a
// convolution multiplies (its GEMMs are the gemm family's), its gradient back onto the
// image (col2im), and max / average pooling. Images are NHWC, `samples` of them, the
// geometry and every per-element formula in core/conv_math.hpp. Each backward is a
// gather: deterministic, no atomics. Implementations: host/convolution.hpp,
// cuda/convolution.cuh.
#include <cstddef>
#include <cstdint>

#include "strata/backend/dispatch.hpp"
#include "strata/core/conv_math.hpp"

namespace strata::backend {

namespace impl {
template <class Queue>
struct convolution_kernels;
}  // namespace impl

namespace detail {
inline void check_geometry(const conv_geometry& g, const char* kernel) {
  need(g.H > 0 && g.W > 0 && g.C > 0 && g.KH > 0 && g.KW > 0 && g.stride > 0 && g.pad >= 0, kernel,
       "image and window extents must be positive");
  need(g.OH == conv_out_extent(g.H, g.KH, g.stride, g.pad) && g.OW == conv_out_extent(g.W, g.KW, g.stride, g.pad) &&
           g.OH > 0 && g.OW > 0,
       kernel, "the output extent does not follow from the image, window, stride and padding");
  // pixel indices (a max-pool winner h·W + w) are 32-bit
  need(static_cast<long long>(g.H) * g.W < (1LL << 31), kernel, "an image of 2^31 pixels or more");
}
}  // namespace detail

inline namespace kernels {

// cols [samples·OH·OW, KH·KW·C] = the patches of x [samples, H, W, C] (zeros in the padding).
template <class T, kernel_queue Q>
void im2col(Q& q, std::size_t samples, const conv_geometry& g, const T* x, T* cols) {
  static_assert(detail::is_elem_v<T>);
  if (samples == 0) return;
  detail::check_geometry(g, "im2col");
  detail::need(x && cols, "im2col", "null pointer");
  impl::convolution_kernels<Q>::im2col(q, samples, g, x, cols);
}

// dx [samples, H, W, C] (overwritten) = Σ of the patch-matrix gradient dcols over the
// entries that read each pixel; sums in compute_t<T>.
template <class T, kernel_queue Q>
void col2im(Q& q, std::size_t samples, const conv_geometry& g, const T* dcols, T* dx) {
  static_assert(detail::is_elem_v<T>);
  if (samples == 0) return;
  detail::check_geometry(g, "col2im");
  detail::need(dcols && dx, "col2im", "null pointer");
  impl::convolution_kernels<Q>::col2im(q, samples, g, dcols, dx);
}

// y [samples, OH, OW, C] = the window maxima of x; arg (same size, may be null) = the
// winning pixel h·W + w of each, which the backward routes the gradient to.
template <class T, kernel_queue Q>
void maxpool_forward(Q& q, std::size_t samples, const conv_geometry& g, const T* x, T* y, std::int32_t* arg) {
  static_assert(detail::is_elem_v<T>);
  if (samples == 0) return;
  detail::check_geometry(g, "maxpool_forward");
  detail::need(2 * g.pad <= g.KH && 2 * g.pad <= g.KW, "maxpool_forward",
               "padding more than half the window leaves windows with no pixel");
  detail::need(x && y, "maxpool_forward", "null pointer");
  impl::convolution_kernels<Q>::maxpool_forward(q, samples, g, x, y, arg);
}

// dx (overwritten) = the sum of dy over the windows whose maximum each pixel was.
template <class T, kernel_queue Q>
void maxpool_backward(Q& q, std::size_t samples, const conv_geometry& g, const T* dy, const std::int32_t* arg, T* dx) {
  static_assert(detail::is_elem_v<T>);
  if (samples == 0) return;
  detail::check_geometry(g, "maxpool_backward");
  detail::need(dy && arg && dx, "maxpool_backward", "null pointer");
  impl::convolution_kernels<Q>::maxpool_backward(q, samples, g, dy, arg, dx);
}

// y = the window means of x (padding counted as zeros: PyTorch's count_include_pad).
template <class T, kernel_queue Q>
void avgpool_forward(Q& q, std::size_t samples, const conv_geometry& g, const T* x, T* y) {
  static_assert(detail::is_elem_v<T>);
  if (samples == 0) return;
  detail::check_geometry(g, "avgpool_forward");
  detail::need(x && y, "avgpool_forward", "null pointer");
  impl::convolution_kernels<Q>::avgpool_forward(q, samples, g, x, y);
}

// dx (overwritten) = Σ over the windows covering each pixel of dy / (KH·KW).
template <class T, kernel_queue Q>
void avgpool_backward(Q& q, std::size_t samples, const conv_geometry& g, const T* dy, T* dx) {
  static_assert(detail::is_elem_v<T>);
  if (samples == 0) return;
  detail::check_geometry(g, "avgpool_backward");
  detail::need(dy && dx, "avgpool_backward", "null pointer");
  impl::convolution_kernels<Q>::avgpool_backward(q, samples, g, dy, dx);
}

}  // namespace kernels

}  // namespace strata::backend
