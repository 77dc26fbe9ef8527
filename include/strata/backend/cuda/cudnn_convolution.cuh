// strata-header: cuda-only
#pragma once
// strata CUDA backend: convolutions on cuDNN (the CUDA toolkit's libcudnn), compiled in when
// the strata::cudnn component defines STRATA_WITH_CUDNN; cuda/convolution.cuh's conv2d_*
// call it. Images NHWC and filters KRSC are cuDNN's NHWC tensor and filter formats as they
// are: no copy, no reorder.
//
// Algorithms: cuDNN's heuristics (the _v7 queries) rank them; strata takes the first that is
// deterministic (strata's results do not depend on a launch) and whose workspace fits what
// the plan gave the layer — its im2col work buffer, or the queue's workspace when that is
// larger; implicit GEMM needs none, so one always fits. The choice is kept per problem.
// Math: float exact (FMA) or TF32 as the queue says (its cuBLASLt GEMMs follow the same
// switch); double in double; bf16 and f16 accumulate in float. The bias is added after the
// convolution (backend/elementwise.hpp's bias_activation_forward).
//
// Handles: one cuDNN handle per thread and device, made on first use and kept for the
// process's life (destroying one while the CUDA runtime shuts down is unsafe).
#if defined(STRATA_WITH_CUDNN)
#include <cudnn.h>

#include <cstddef>
#include <map>
#include <string>
#include <type_traits>

#include "strata/backend/dispatch.hpp"
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
  if constexpr (std::is_same_v<T, double>) return CUDNN_DATA_DOUBLE;
  else if constexpr (std::is_same_v<T, bf16>) return CUDNN_DATA_BFLOAT16;
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
  descriptors(std::size_t samples, const conv_geometry& g, std::size_t out_c, fp32_math math, T*) {
    const cudnnDataType_t t = data_type<T>();
    const cudnnDataType_t acc = std::is_same_v<T, double> ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    STRATA_GPU_CHECK(cudnnCreateTensorDescriptor(&x));
    STRATA_GPU_CHECK(cudnnCreateTensorDescriptor(&y));
    STRATA_GPU_CHECK(cudnnCreateFilterDescriptor(&w));
    STRATA_GPU_CHECK(cudnnCreateConvolutionDescriptor(&conv));
    const int n = static_cast<int>(samples), O = static_cast<int>(out_c);
    STRATA_GPU_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NHWC, t, n, g.C, g.H, g.W));
    STRATA_GPU_CHECK(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NHWC, t, n, O, g.OH, g.OW));
    STRATA_GPU_CHECK(cudnnSetFilter4dDescriptor(w, t, CUDNN_TENSOR_NHWC, O, g.C, g.KH, g.KW));  // KRSC
    STRATA_GPU_CHECK(cudnnSetConvolution2dDescriptor(conv, g.pad, g.pad, g.stride, g.stride, 1, 1,
                                                     CUDNN_CROSS_CORRELATION, acc));
    cudnnMathType_t m = CUDNN_DEFAULT_MATH;  // double; float in TF32 mode
    if constexpr (std::is_same_v<T, float>) m = math == fp32_math::tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    if constexpr (is_half16_v<T>) m = CUDNN_TENSOR_OP_MATH;
    STRATA_GPU_CHECK(cudnnSetConvolutionMathType(conv, m));
  }
  ~descriptors() {
    if (conv) (void)cudnnDestroyConvolutionDescriptor(conv);
    if (w) (void)cudnnDestroyFilterDescriptor(w);
    if (y) (void)cudnnDestroyTensorDescriptor(y);
    if (x) (void)cudnnDestroyTensorDescriptor(x);
  }
  descriptors(const descriptors&) = delete;
  descriptors& operator=(const descriptors&) = delete;
};

struct problem {
  pass kind;
  int device, type, math;
  long long samples, H, W, C, O, KH, KW, stride, pad, space;
  auto operator<=>(const problem&) const = default;
};

struct choice {
  int algo = 0;
  std::size_t bytes = 0;
};

class runner {
 public:
  static runner& of_this_thread() {
    thread_local runner r;
    return r;
  }

  // y = conv(x, w)
  template <class T>
  void forward(queue& q, std::size_t samples, const conv_geometry& g, std::size_t out_c, const T* x, const T* w,
               T* y, void* work, std::size_t work_bytes) {
    descriptors d(samples, g, out_c, q.math(), static_cast<T*>(nullptr));
    const workspace s = space(q, work, work_bytes);
    const choice c = pick<T>(q, pass::forward, samples, g, out_c, d, s.bytes);
    const auto one = scalar<T>(1), zero = scalar<T>(0);
    STRATA_GPU_CHECK(cudnnConvolutionForward(handle(q), &one, d.x, x, d.w, w, d.conv,
                                             static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), s.p, c.bytes, &zero,
                                             d.y, y));
  }

  // dx = the input gradient (overwritten)
  template <class T>
  void backward_data(queue& q, std::size_t samples, const conv_geometry& g, std::size_t out_c, const T* dy,
                     const T* w, T* dx, void* work, std::size_t work_bytes) {
    descriptors d(samples, g, out_c, q.math(), static_cast<T*>(nullptr));
    const workspace s = space(q, work, work_bytes);
    const choice c = pick<T>(q, pass::backward_data, samples, g, out_c, d, s.bytes);
    const auto one = scalar<T>(1), zero = scalar<T>(0);
    STRATA_GPU_CHECK(cudnnConvolutionBackwardData(handle(q), &one, d.w, w, d.y, dy, d.conv,
                                                  static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo), s.p, c.bytes,
                                                  &zero, d.x, dx));
  }

  // dw += the filter gradient (cuDNN's beta = 1)
  template <class T>
  void backward_weights(queue& q, std::size_t samples, const conv_geometry& g, std::size_t out_c, const T* x,
                        const T* dy, T* dw, void* work, std::size_t work_bytes) {
    descriptors d(samples, g, out_c, q.math(), static_cast<T*>(nullptr));
    const workspace s = space(q, work, work_bytes);
    const choice c = pick<T>(q, pass::backward_weights, samples, g, out_c, d, s.bytes);
    const auto one = scalar<T>(1);
    STRATA_GPU_CHECK(cudnnConvolutionBackwardFilter(handle(q), &one, d.x, x, d.y, dy, d.conv,
                                                    static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo), s.p,
                                                    c.bytes, &one, d.w, dw));
  }

 private:
  struct workspace {
    void* p;
    std::size_t bytes;
  };

  // cuDNN's scaling factors: double for double data, float otherwise.
  template <class T>
  static auto scalar(double v) {
    if constexpr (std::is_same_v<T, double>) return v;
    else return static_cast<float>(v);
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

  // The first deterministic algorithm, in cuDNN's ranking, whose workspace fits `bytes`.
  template <class T>
  choice pick(queue& q, pass kind, std::size_t samples, const conv_geometry& g, std::size_t out_c,
              const descriptors& d, std::size_t bytes) {
    const auto ll = [](std::size_t v) { return static_cast<long long>(v); };
    const problem key{kind, q.device(), static_cast<int>(data_type<T>()), static_cast<int>(q.math()), ll(samples), g.H,
                      g.W,  g.C,        ll(out_c), g.KH, g.KW, g.stride, g.pad, ll(bytes)};
    if (auto it = choices_.find(key); it != choices_.end()) return it->second;
    cudnnHandle_t h = handle(q);
    choice c;
    bool found = false;
    auto consider = [&](const auto* perf, int n) {
      for (int i = 0; i < n && !found; ++i)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].determinism == CUDNN_DETERMINISTIC &&
            perf[i].memory <= bytes) {
          c = {static_cast<int>(perf[i].algo), perf[i].memory};
          found = true;
        }
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
    if (!found)
      ::strata::backend::detail::fail("conv2d (cuDNN)", "no deterministic algorithm fits the workspace of " + std::to_string(bytes) +
                                 " bytes for this convolution");
    choices_.emplace(key, c);
    return c;
  }

  std::map<int, cudnnHandle_t> handles_;
  std::map<problem, choice> choices_;
};

}  // namespace detail::cudnn_conv

}  // namespace strata::backend::cuda
#endif
