#pragma once
// Convolution and pooling over images stored NHWC (a sample is [H, W, C], channels
// last): the geometry and the per-element formulas both backends run (host loops, CUDA
// threads). Channels last makes an image's pixels the rows of a [pixels, C] matrix, the
// layout every other layer already reads: a 1×1 convolution is a plain GEMM, batch
// normalisation sums columns, and a convolution is a GEMM over the im2col patch matrix
// [N·OH·OW, KH·KW·C] (the layout cuDNN's and cuBLASLt's tensor-core paths want too).
// Filters are [OutC, KH, KW, InC] (KRSC: PyTorch's [O, I, KH, KW] in channels-last order).
//
// Every backward is a gather (each input element sums what reads it), so results do not
// depend on thread order and no atomics are needed.
#include <cstddef>

#include "strata/core/hd.hpp"

namespace strata {

// Output extent of a window of `k` taps moved by `stride` over `in + 2·pad` (PyTorch's
// floor rule); ≤ 0 when the window does not fit.
constexpr int conv_out_extent(int in, int k, int stride, int pad) {
  return in + 2 * pad < k || stride < 1 ? 0 : (in + 2 * pad - k) / stride + 1;
}

struct conv_geometry {
  int H = 0, W = 0, C = 0;      // a sample's input [H, W, C]
  int KH = 1, KW = 1;           // window
  int stride = 1, pad = 0;      // the same on both axes
  int OH = 0, OW = 0;           // output extent

  static constexpr conv_geometry of(int H, int W, int C, int KH, int KW, int stride, int pad) {
    return {H, W, C, KH, KW, stride, pad, conv_out_extent(H, KH, stride, pad), conv_out_extent(W, KW, stride, pad)};
  }
  STRATA_HD constexpr std::size_t in_pixels() const { return std::size_t(H) * std::size_t(W); }
  STRATA_HD constexpr std::size_t out_pixels() const { return std::size_t(OH) * std::size_t(OW); }
  STRATA_HD constexpr std::size_t taps() const { return std::size_t(KH) * std::size_t(KW); }
  // One row of the patch matrix: [KH, KW, C].
  STRATA_HD constexpr std::size_t patch() const { return taps() * std::size_t(C); }
  // A 1×1 window moved by 1 without padding reads the input as it is: no im2col.
  STRATA_HD constexpr bool identity_patches() const { return KH == 1 && KW == 1 && stride == 1 && pad == 0; }
};

namespace math::conv {

// Output positions o in [0, out) whose window covers input position i along one axis: tap
// t = i + pad − o·stride ∈ [0, k). Returns [lo, hi).
struct span {
  int lo, hi;
};
STRATA_HD inline span covering(int i, int k, int stride, int pad, int out) {
  const int top = i + pad;  // o·stride ≤ top and o·stride > top − k
  int lo = top - k + 1 <= 0 ? 0 : (top - k + 1 + stride - 1) / stride;
  int hi = top / stride + 1;
  if (hi > out) hi = out;
  if (lo > hi) lo = hi;
  return {lo, hi};
}

// Patch-matrix element (row = output pixel p of sample x, column = (kh, kw, c)): the input
// it reads, or 0 in the padding.
template <class T>
STRATA_HD T im2col_value(const conv_geometry& g, const T* x, std::size_t p, std::size_t col) {
  const int c = int(col % std::size_t(g.C));
  const std::size_t tap = col / std::size_t(g.C);
  const int kh = int(tap / std::size_t(g.KW)), kw = int(tap % std::size_t(g.KW));
  const int oh = int(p / std::size_t(g.OW)), ow = int(p % std::size_t(g.OW));
  const int h = oh * g.stride - g.pad + kh, w = ow * g.stride - g.pad + kw;
  if (h < 0 || h >= g.H || w < 0 || w >= g.W) return T(0);
  return x[(std::size_t(h) * std::size_t(g.W) + std::size_t(w)) * std::size_t(g.C) + std::size_t(c)];
}

// col2im: the input gradient at pixel (h, w), channel c of one sample, from that
// sample's patch-matrix gradient (the sum over every patch entry that read it).
template <class A, class T>
STRATA_HD A col2im_value(const conv_geometry& g, const T* dcols, int h, int w, int c) {
  const span sh = covering(h, g.KH, g.stride, g.pad, g.OH), sw = covering(w, g.KW, g.stride, g.pad, g.OW);
  A s = A(0);
  for (int oh = sh.lo; oh < sh.hi; ++oh) {
    const int kh = h + g.pad - oh * g.stride;
    for (int ow = sw.lo; ow < sw.hi; ++ow) {
      const int kw = w + g.pad - ow * g.stride;
      const std::size_t row = std::size_t(oh) * std::size_t(g.OW) + std::size_t(ow);
      s += A(dcols[row * g.patch() + (std::size_t(kh) * std::size_t(g.KW) + std::size_t(kw)) * std::size_t(g.C) +
                   std::size_t(c)]);
    }
  }
  return s;
}

// f(h, w) for the pixels of output (oh, ow)'s window that lie inside the image, in scan
// order (row by row): the walk max and mean pooling share.
template <class F>
STRATA_HD void for_window(const conv_geometry& g, int oh, int ow, F&& f) {
  for (int kh = 0; kh < g.KH; ++kh) {
    const int h = oh * g.stride - g.pad + kh;
    if (h < 0 || h >= g.H) continue;
    for (int kw = 0; kw < g.KW; ++kw) {
      const int w = ow * g.stride - g.pad + kw;
      if (w >= 0 && w < g.W) f(h, w);
    }
  }
}

// Max pooling's rule for the next pixel's value v against the maximum so far (`best`, if
// `have` one): v wins when it is the first, larger, or a NaN — unless a NaN already won.
template <class A>
STRATA_HD bool max_takes(A v, A best, bool have) {
  return (!have || v > best || v != v) && !(have && best != best);
}

// Max pooling at output pixel (oh, ow), channel c of one sample: the maximum over the
// window's pixels inside the image (padding never wins, as PyTorch) and the index h·W + w
// of the first maximum in scan order; a NaN wins and propagates.
template <class A, class T>
STRATA_HD A max_window(const conv_geometry& g, const T* x, int oh, int ow, int c, int& arg) {
  A best = A(0);
  int at = -1;
  for_window(g, oh, ow, [&](int h, int w) {
    const A v = A(x[(std::size_t(h) * std::size_t(g.W) + std::size_t(w)) * std::size_t(g.C) + std::size_t(c)]);
    if (max_takes(v, best, at >= 0)) {
      best = v;
      at = h * g.W + w;
    }
  });
  arg = at;
  return best;
}

// Max pooling's input gradient at (h, w, c): the output gradients of the windows whose
// maximum was this pixel.
template <class A, class T, class I>
STRATA_HD A max_window_grad(const conv_geometry& g, const T* dy, const I* arg, int h, int w, int c) {
  const span sh = covering(h, g.KH, g.stride, g.pad, g.OH), sw = covering(w, g.KW, g.stride, g.pad, g.OW);
  const int me = h * g.W + w;
  A s = A(0);
  for (int oh = sh.lo; oh < sh.hi; ++oh)
    for (int ow = sw.lo; ow < sw.hi; ++ow) {
      const std::size_t o = (std::size_t(oh) * std::size_t(g.OW) + std::size_t(ow)) * std::size_t(g.C) + std::size_t(c);
      if (int(arg[o]) == me) s += A(dy[o]);
    }
  return s;
}

// Average pooling: the window's sum over KH·KW taps, padding counted as zeros
// (PyTorch's count_include_pad = True); global average pooling is the window H × W.
template <class A, class T>
STRATA_HD A mean_window(const conv_geometry& g, const T* x, int oh, int ow, int c) {
  A s = A(0);
  for_window(g, oh, ow, [&](int h, int w) {
    s += A(x[(std::size_t(h) * std::size_t(g.W) + std::size_t(w)) * std::size_t(g.C) + std::size_t(c)]);
  });
  return s / A(g.taps());
}
template <class A, class T>
STRATA_HD A mean_window_grad(const conv_geometry& g, const T* dy, int h, int w, int c) {
  const span sh = covering(h, g.KH, g.stride, g.pad, g.OH), sw = covering(w, g.KW, g.stride, g.pad, g.OW);
  A s = A(0);
  for (int oh = sh.lo; oh < sh.hi; ++oh)
    for (int ow = sw.lo; ow < sw.hi; ++ow)
      s += A(dy[(std::size_t(oh) * std::size_t(g.OW) + std::size_t(ow)) * std::size_t(g.C) + std::size_t(c)]);
  return s / A(g.taps());
}

}  // namespace math::conv

}  // namespace strata
