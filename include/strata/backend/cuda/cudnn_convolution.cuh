// strata-header: cuda-only
#pragma once
// strata CUDA backend: convolutions on cuDNN (the CUDA toolkit's libcudnn), compiled in when
// the strata::cudnn component defines STRATA_WITH_CUDNN; cuda/convolution.cuh's conv2d_*
// call it. Images NHWC and filters KRSC are cuDNN's NHWC tensor and filter formats as they
// are: no copy, no reorder.
//
// Algorithms: cuDNN's heuristics (the _v7 queries) rank (algorithm, math type) pairs; strata
// takes the first that is deterministic (strata's results do not depend on a launch), whose
// math is allowed — float exact: FMA (never TF32); TF32 (the queue's switch, as for its
// cuBLASLt GEMMs): any; bf16 / f16: any, accumulating in float — and whose workspace fits the
// layer's im2col work buffer or the queue's workspace, the larger. The
// choice is kept per problem. Where none qualifies (a backward algorithm needing more
// workspace, an unsupported bf16 shape, tensors of 2^31 elements or more), or a CUDA graph
// is being captured before the problem was met eagerly (cuDNN's handle and heuristics must
// not run inside a capture), the call returns false and the front runs im2col and cuBLASLt.
// double stays with im2col: cuDNN has no NHWC float64 convolution to rely on. The bias is
// added after the convolution (backend/elementwise.hpp's bias_activation_forward; bf16:
// rounded twice, where the im2col path rounds once).
//
// Handles: one cuDNN handle per thread and device (the queue's device is current, as the
// queue requires), made on first use and kept for the process's life (destroying one while
// the CUDA runtime shuts down is unsafe).
#if defined(STRATA_WITH_CUDNN)
#include <cudnn.h>

#include <cstddef>
#include <map>
#include <string>
#include <type_traits>

#include "strata/backend/cuda/check.hpp"
#include "strata/backend/cuda/cuda.hpp"
#include "strata/core/conv_math.hpp"
#include "strata/core/precision.hpp"

namespace strata::backend::cuda {

template <>
struct status_traits<cudnnStatus_t> {
  static constexpr const char* library = "cuDNN";
  static bool ok(cudnnStatus_t s) noexcept { return s == CUDNN_STATUS_SUCCESS; }
  static std::string describe(cudnnStatus_t s) { return cudnnGetErrorString(s); }
};

namespace detail::cudnn_conv {

template <class T>
constexpr cudnnDataType_t data_type() {
  if constexpr (std::is_same_v<T, bf16>) return CUDNN_DATA_BFLOAT16;
  else if constexpr (std::is_same_v<T, f16>) return CUDNN_DATA_HALF;
  else return CUDNN_DATA_FLOAT;
}

enum class pass : int { forward, backward_data, backward_weights };

// One problem's descriptors (host objects, made per call: microseconds).
struct descriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  template <class T>
  descriptors(std::size_t samples, const conv_geometry& g, std::size_t out_c, T*) {
    try {
      const cudnnDataType_t t = data_type<T>();
      STRATA_GPU_CHECK(cudnnCreateTensorDescriptor(&x));
      STRATA_GPU_CHECK(cudnnCreateTensorDescriptor(&y));
      STRATA_GPU_CHECK(cudnnCreateFilterDescriptor(&w));
      STRATA_GPU_CHECK(cudnnCreateConvolutionDescriptor(&conv));
      const int n = static_cast<int>(samples), O = static_cast<int>(out_c);
      STRATA_GPU_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NHWC, t, n, g.C, g.H, g.W));
      STRATA_GPU_CHECK(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NHWC, t, n, O, g.OH, g.OW));
      STRATA_GPU_CHECK(cudnnSetFilter4dDescriptor(w, t, CUDNN_TENSOR_NHWC, O, g.C, g.KH, g.KW));  // KRSC
      STRATA_GPU_CHECK(cudnnSetConvolution2dDescriptor(conv, g.pad, g.pad, g.stride, g.stride, 1, 1,
                                                       CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    } catch (...) {
      release();
      throw;
    }
  }
  ~descriptors() { release(); }
  descriptors(const descriptors&) = delete;
  descriptors& operator=(const descriptors&) = delete;

  void release() noexcept {
    if (conv) (void)cudnnDestroyConvolutionDescriptor(conv);
    if (w) (void)cudnnDestroyFilterDescriptor(w);
    if (y) (void)cudnnDestroyTensorDescriptor(y);
    if (x) (void)cudnnDestroyTensorDescriptor(x);
    conv = nullptr, w = nullptr, y = nullptr, x = nullptr;
  }
};

// Whether cuDNN's 4-D descriptors (int extents and element counts) hold the problem.
inline bool fits_int(std::size_t samples, const conv_geometry& g, std::size_t out_c) {
  const std::size_t lim = std::size_t(1) << 31;
  return samples * g.in_pixels() * std::size_t(g.C) < lim && samples * g.out_pixels() * out_c < lim &&
         out_c * g.patch() < lim;
}

struct problem {
  pass kind;
  int device, type, math;
  long long samples, H, W, C, O, KH, KW, stride, pad, space;
  auto operator<=>(const problem&) const = default;
};

struct choice {
  int algo = -1;  // -1: none qualifies (the front runs im2col)
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  std::size_t bytes = 0;
};

class runner {
 public:
  static runner& of_this_thread() {
    thread_local runner r;
    return r;
  }

  // y = conv(x, w); false: not run (the front runs im2col)
  template <class T>
  bool forward(queue& q, std::size_t samples, const conv_geometry& g, std::size_t out_c, const T* x, const T* w,
               T* y, void* work, std::size_t work_bytes) {
    return with_choice<T>(q, pass::forward, samples, g, out_c, work, work_bytes,
                          [&](cudnnHandle_t h, const descriptors& d, const workspace& s, int algo) {
                            const float one = 1.0f, zero = 0.0f;
                            STRATA_GPU_CHECK(cudnnConvolutionForward(
                                h, &one, d.x, x, d.w, w, d.conv, static_cast<cudnnConvolutionFwdAlgo_t>(algo), s.p,
                                s.bytes, &zero, d.y, y));
                          });
  }

  // dx = the input gradient (overwritten)
  template <class T>
  bool backward_data(queue& q, std::size_t samples, const conv_geometry& g, std::size_t out_c, const T* dy,
                     const T* w, T* dx, void* work, std::size_t work_bytes) {
    return with_choice<T>(q, pass::backward_data, samples, g, out_c, work, work_bytes,
                          [&](cudnnHandle_t h, const descriptors& d, const workspace& s, int algo) {
                            const float one = 1.0f, zero = 0.0f;
                            STRATA_GPU_CHECK(cudnnConvolutionBackwardData(
                                h, &one, d.w, w, d.y, dy, d.conv, static_cast<cudnnConvolutionBwdDataAlgo_t>(algo),
                                s.p, s.bytes, &zero, d.x, dx));
                          });
  }

  // dw += the filter gradient (cuDNN's beta = 1)
  template <class T>
  bool backward_weights(queue& q, std::size_t samples, const conv_geometry& g, std::size_t out_c, const T* x,
                        const T* dy, T* dw, void* work, std::size_t work_bytes) {
    return with_choice<T>(q, pass::backward_weights, samples, g, out_c, work, work_bytes,
                          [&](cudnnHandle_t h, const descriptors& d, const workspace& s, int algo) {
                            const float one = 1.0f;
                            STRATA_GPU_CHECK(cudnnConvolutionBackwardFilter(
                                h, &one, d.x, x, d.y, dy, d.conv, static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo),
                                s.p, s.bytes, &one, d.w, dw));
                          });
  }

 private:
  struct workspace {
    void* p;
    std::size_t bytes;
  };

  // call(handle, descriptors, workspace, algorithm) for the problem, with the chosen algorithm
  // set up; false, and nothing run, where cuDNN does not serve it (see the top of this file).
  template <class T, class F>
  bool with_choice(queue& q, pass kind, std::size_t samples, const conv_geometry& g, std::size_t out_c, void* work,
                   std::size_t work_bytes, F&& call) {
    if (!fits_int(samples, g, out_c)) return false;
    descriptors d(samples, g, out_c, static_cast<T*>(nullptr));
    const workspace s = space(q, work, work_bytes);
    const choice* c = pick<T>(q, kind, samples, g, out_c, d, s.bytes);
    if (!c) return false;
    call(handle(q), d, s, c->algo);
    return true;
  }

  // The larger of the layer's work buffer and the queue's workspace (both stream-ordered).
  static workspace space(queue& q, void* work, std::size_t work_bytes) {
    if (work && work_bytes >= q.workspace_bytes()) return {work, work_bytes};
    return {q.workspace(), q.workspace_bytes()};
  }

  cudnnHandle_t handle(queue& q) {
    cudnnHandle_t& h = handles_[q.device()];
    if (!h) STRATA_GPU_CHECK(cudnnCreate(&h));
    STRATA_GPU_CHECK(cudnnSetStream(h, q.stream()));
    return h;
  }

  static bool capturing(queue& q) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    STRATA_CUDA_CHECK(cudaStreamIsCapturing(q.stream(), &status));
    return status != cudaStreamCaptureStatusNone;
  }

  // The first qualifying (algorithm, math) pair in cuDNN's ranking (see the top of this
  // file), set on d.conv; null when none qualifies or the choice cannot be made now.
  template <class T>
  const choice* pick(queue& q, pass kind, std::size_t samples, const conv_geometry& g, std::size_t out_c,
                     const descriptors& d, std::size_t bytes) {
    const auto ll = [](std::size_t v) { return static_cast<long long>(v); };
    const problem key{kind, q.device(), static_cast<int>(data_type<T>()), static_cast<int>(q.math()), ll(samples), g.H,
                      g.W,  g.C,        ll(out_c), g.KH, g.KW, g.stride, g.pad, ll(bytes)};
    auto it = choices_.find(key);
    if (it == choices_.end()) {
      if (capturing(q)) return nullptr;  // met first inside a CUDA graph capture: im2col there
      it = choices_.emplace(key, rank<T>(q, kind, d, bytes)).first;
    }
    if (it->second.algo < 0) return nullptr;
    STRATA_GPU_CHECK(cudnnSetConvolutionMathType(d.conv, it->second.math));
    return &it->second;
  }

  template <class T>
  choice rank(queue& q, pass kind, const descriptors& d, std::size_t bytes) {
    // the query's math type, as PyTorch sets it: FMA for exact float, default (TF32 allowed)
    // in TF32 mode, tensor ops for bf16 / f16
    const bool fma_only = std::is_same_v<T, float> && q.math() != fp32_math::tf32;
    const cudnnMathType_t asked = fma_only ? CUDNN_FMA_MATH : std::is_same_v<T, float> ? CUDNN_DEFAULT_MATH
                                                                                        : CUDNN_TENSOR_OP_MATH;
    STRATA_GPU_CHECK(cudnnSetConvolutionMathType(d.conv, asked));
    cudnnHandle_t h = handle(q);
    choice c;
    auto consider = [&](const auto* perf, int n) {
      for (int i = 0; i < n && c.algo < 0; ++i)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].determinism == CUDNN_DETERMINISTIC &&
            perf[i].memory <= bytes &&
            (!fma_only || perf[i].mathType == CUDNN_FMA_MATH || perf[i].mathType == CUDNN_DEFAULT_MATH))
          // exact float runs with FMA math whatever the entry says: never TF32
          c = {static_cast<int>(perf[i].algo), fma_only ? CUDNN_FMA_MATH : perf[i].mathType, perf[i].memory};
    };
    int n = 0;
    if (kind == pass::forward) {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      STRATA_GPU_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y,
                                                               CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf));
      consider(perf, n);
    } else if (kind == pass::backward_data) {
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      STRATA_GPU_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x,
                                                                    CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf));
      consider(perf, n);
    } else {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      STRATA_GPU_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
          h, d.x, d.y, d.conv, d.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf));
      consider(perf, n);
    }
    return c;
  }

  std::map<int, cudnnHandle_t> handles_;
  std::map<problem, choice> choices_;
};

}  // namespace detail::cudnn_conv

}  // namespace strata::backend::cuda
#endif
