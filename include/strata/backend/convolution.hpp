#pragma once
// The convolution kernel family's front (dispatch.hpp): a convolution's forward and its two
// backwards (conv2d_*), the im2col patch matrix and its gradient back onto the image
// (col2im) they are built of where no library convolution serves, and max / average
// pooling. Images are NHWC, `samples` of them, filters KRSC ([O, KH, KW, C]); the geometry
// and every per-element formula in core/conv_math.hpp. Each backward of ours is a gather:
// deterministic, no atomics. Implementations: host/convolution.hpp (oneDNN for float when
// built with strata::dnnl), cuda/convolution.cuh.
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "strata/backend/dispatch.hpp"
#include "strata/backend/gemm.hpp"
#include "strata/backend/reduction.hpp"
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

// Whether Q's implementation may convolve T itself (a library convolution); its conv2d_*
// return false where it cannot for a problem, and the front then runs im2col and the gemm
// family.
template <class Q, class T>
inline constexpr bool native_conv2d_v = impl::convolution_kernels<Q>::template native_conv2d<T>;

// The im2col patch matrix of x, in work; x itself when the patches are the image.
template <class Q, class T>
const T* patches(Q& q, std::size_t samples, const conv_geometry& g, const T* x, T* work) {
  if (g.identity_patches()) return x;
  impl::convolution_kernels<Q>::im2col(q, samples, g, x, work);
  return work;
}

inline void check_conv2d(const conv_geometry& g, std::size_t out_c, const char* kernel) {
  check_geometry(g, kernel);
  need(out_c > 0, kernel, "no output channels");
}
}  // namespace detail

inline namespace kernels {

// Values of the work buffer the conv2d_* entries take for `samples` images: the im2col
// patch matrix [samples·OH·OW, KH·KW·C], none when the patches are the image itself (a
// 1×1 window moved by 1 without padding). A library convolution may use it as its
// workspace (cuDNN) or leave it unused (oneDNN).
constexpr std::size_t conv2d_work_values(std::size_t samples, const conv_geometry& g) {
  return g.identity_patches() ? 0 : samples * g.out_pixels() * g.patch();
}

// y [samples·OH·OW, O] = the convolution of x [samples, H, W, C] by w [O, KH, KW, C]
// (cross-correlation) + bias (length O; may be null): Y = cols·Wᵀ + b over the im2col
// patches `cols`. work: conv2d_work_values(samples, g) values.
template <class T, kernel_queue Q>
void conv2d_forward(Q& q, std::size_t samples, const conv_geometry& g, std::size_t out_c, const T* x, const T* w,
                    const T* bias, T* y, T* work) {
  static_assert(detail::is_elem_v<T>);
  if (samples == 0) return;
  detail::check_conv2d(g, out_c, "conv2d_forward");
  detail::need(x && w && y && (work || g.identity_patches()), "conv2d_forward", "null pointer");
  if constexpr (detail::native_conv2d_v<Q, T>)
    if (impl::convolution_kernels<Q>::conv2d_forward(q, samples, g, out_c, x, w, bias, y, work)) return;
  using S = gemm_scalar_t<T>;
  const std::size_t rows = samples * g.out_pixels(), P = g.patch();
  const T* cols = detail::patches(q, samples, g, x, work);
  gemm_bias_act(q, trans::N, trans::T, rows, out_c, P, S(1), cols, P, w, P, S(0), y, out_c, bias, activation::none,
                static_cast<T*>(nullptr));
}

// dw [O, KH, KW, C] += dyᵀ·cols (the patches of x) and db (length O; may be null) += Σ dy
// over the pixels: G is the gradients' type (float for bf16 / f16 activations).
template <class T, class G, kernel_queue Q>
void conv2d_backward_weights(Q& q, std::size_t samples, const conv_geometry& g, std::size_t out_c, const T* x,
                             const T* dy, G* dw, G* db, T* work) {
  static_assert(detail::is_elem_v<T> && detail::is_real_v<G>);
  if (samples == 0) return;
  detail::check_conv2d(g, out_c, "conv2d_backward_weights");
  detail::need(x && dy && dw && (work || g.identity_patches()), "conv2d_backward_weights", "null pointer");
  const std::size_t rows = samples * g.out_pixels(), P = g.patch();
  bool done = false;
  if constexpr (detail::native_conv2d_v<Q, T> && std::is_same_v<G, T>)
    done = impl::convolution_kernels<Q>::conv2d_backward_weights(q, samples, g, out_c, x, dy, dw, work);
  if (!done) {
    using S = gemm_scalar_t<T>;
    const T* cols = detail::patches(q, samples, g, x, work);
    gemm(q, trans::T, trans::N, out_c, P, rows, S(1), dy, out_c, cols, P, S(1), dw, P);
  }
  if (db) bias_grad(q, rows, out_c, dy, db, true);
}

// dx [samples, H, W, C] (overwritten) = the gradient of the input: dcols = dY·W gathered
// back onto the image (col2im). work as conv2d_forward's.
template <class T, kernel_queue Q>
void conv2d_backward_data(Q& q, std::size_t samples, const conv_geometry& g, std::size_t out_c, const T* dy,
                          const T* w, T* dx, T* work) {
  static_assert(detail::is_elem_v<T>);
  if (samples == 0) return;
  detail::check_conv2d(g, out_c, "conv2d_backward_data");
  detail::need(dy && w && dx && (work || g.identity_patches()), "conv2d_backward_data", "null pointer");
  if constexpr (detail::native_conv2d_v<Q, T>)
    if (impl::convolution_kernels<Q>::conv2d_backward_data(q, samples, g, out_c, dy, w, dx, work)) return;
  using S = gemm_scalar_t<T>;
  const std::size_t rows = samples * g.out_pixels(), P = g.patch();
  T* dcols = g.identity_patches() ? dx : work;
  gemm(q, trans::N, trans::N, rows, P, out_c, S(1), dy, out_c, w, P, S(0), dcols, P);
  if (!g.identity_patches()) impl::convolution_kernels<Q>::col2im(q, samples, g, static_cast<const T*>(dcols), dx);
}

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
