// strata-header: cuda-only
#pragma once
// strata CUDA backend, optimizers: the CUDA implementation of backend/optimizer.hpp,
// and the multi-tensor forms it runs on (CUDA only: many tensors per launch), over
// strata/core/math.hpp's element updates.
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
#include "strata/backend/optimizer.hpp"

namespace strata::backend::cuda {

// ---------------------------------------------------------------------------
// Optimizers: PyTorch semantics and operation order, as the host kernels.
// The *_multi forms update many tensors in one launch: tensor pointers and
// sizes travel in the kernel's parameter block (up to 64 tensors per launch,
// more tensors -> more launches), each block takes a 16384-element chunk of
// one tensor, found by binary search over the tensors' first-chunk indices.
// ---------------------------------------------------------------------------

template <class T>
struct adam_tensor {
  T* param;
  const T* grad;
  T* m;
  T* v;
  std::size_t n;
};

template <class T>
struct sgd_tensor {
  T* param;
  const T* grad;
  T* velocity;  // may be null when momentum == 0
  std::size_t n;
};

namespace detail {

// Kernel parameter block (< 4 KiB, the portable parameter limit).
template <class T, int Arrays>
struct multi_args {
  T* ptr[Arrays][multi_max_tensors];
  std::uint64_t n[multi_max_tensors];
  std::uint32_t first[multi_max_tensors + 1];  // first chunk (block) of each tensor; [count] = total
  int count;
};
static_assert(sizeof(multi_args<double, 4>) + sizeof(math::adam_scalars<double>) < 4000);

template <int Arrays, class T>
__device__ __forceinline__ int owning_tensor(const multi_args<T, Arrays>& a) {
  int lo = 0, hi = a.count - 1;
  const std::uint32_t b = blockIdx.x;
  while (lo < hi) {  // last tensor whose first chunk <= b
    const int mid = (lo + hi + 1) / 2;
    if (a.first[mid] <= b)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// Arrays: 0 param, 1 grad, 2 m / velocity, 3 v.
template <class T>
__global__ void __launch_bounds__(multi_threads)
    k_adam_multi(const __grid_constant__ multi_args<T, 4> a, const math::adam_scalars<T> s) {
  const int t = owning_tensor(a);
  T* p = a.ptr[0][t];
  const T* g = a.ptr[1][t];
  T* m = a.ptr[2][t];
  T* v = a.ptr[3][t];
  const std::size_t begin = std::size_t(blockIdx.x - a.first[t]) * multi_chunk;
  const std::size_t end = d_min(a.n[t], begin + multi_chunk);
  constexpr int W = vec_width<T>;
  const bool vec = aligned16(p) && aligned16(g) && aligned16(m) && aligned16(v);  // uniform per block
  std::size_t i = begin + std::size_t(threadIdx.x) * W;
  if (vec) {
    for (; i + W <= end; i += std::size_t(blockDim.x) * W) {
      T pv[W], gv[W], mv[W], vv[W];
      load<W>(p + i, pv);
      load<W>(g + i, gv);
      load<W>(m + i, mv);
      load<W>(v + i, vv);
#pragma unroll
      for (int k = 0; k < W; ++k) math::adam_update(pv[k], gv[k], mv[k], vv[k], s);
      store<W>(p + i, pv);
      store<W>(m + i, mv);
      store<W>(v + i, vv);
    }
    // The chunk's tail (< W elements, only in a tensor's last chunk).
    const std::size_t tail = begin + (end - begin) / W * W;
    for (std::size_t j = tail + threadIdx.x; j < end; j += blockDim.x) math::adam_update(p[j], g[j], m[j], v[j], s);
  } else {
    for (std::size_t j = begin + threadIdx.x; j < end; j += blockDim.x) math::adam_update(p[j], g[j], m[j], v[j], s);
  }
}

template <class T>
__global__ void __launch_bounds__(multi_threads)
    k_sgd_multi(const __grid_constant__ multi_args<T, 3> a, const math::sgd_scalars<T> s) {
  const int t = owning_tensor(a);
  T* p = a.ptr[0][t];
  const T* g = a.ptr[1][t];
  T* vel = a.ptr[2][t];
  const std::size_t begin = std::size_t(blockIdx.x - a.first[t]) * multi_chunk;
  const std::size_t end = d_min(a.n[t], begin + multi_chunk);
  T dummy = T(0);
  for (std::size_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
    T pj = p[j];
    math::sgd_update(pj, g[j], s.use_mom ? vel + j : &dummy, s);
    p[j] = pj;
  }
}

// Packs tensors into parameter blocks and launches one kernel per block.
template <class T, int Arrays, class Tensor, class Pointers, class Launch>
void launch_multi(queue& q, std::span<const Tensor> tensors, Pointers pointers, Launch launch) {
  multi_args<T, Arrays> a{};
  std::uint32_t chunks = 0;
  const auto flush = [&] {
    if (a.count == 0) return;
    a.first[a.count] = chunks;
    launch(a, chunks);
    a = multi_args<T, Arrays>{};
    chunks = 0;
  };
  for (const Tensor& t : tensors) {
    if (t.n == 0) continue;
    const std::size_t c = (t.n + multi_chunk - 1) / multi_chunk;
    if (c > (std::size_t(1) << 30)) fail("optimizer", "tensor too large for one launch");
    if (a.count == multi_max_tensors || std::size_t(chunks) + c > (std::size_t(1) << 31) - 1) flush();
    const auto ptrs = pointers(t);
    for (int k = 0; k < Arrays; ++k) a.ptr[k][a.count] = ptrs[k];
    a.n[a.count] = t.n;
    a.first[a.count] = chunks;
    chunks += static_cast<std::uint32_t>(c);
    ++a.count;
  }
  flush();
  (void)q;
}

}  // namespace detail

// torch.optim.Adam / AdamW over many tensors in few launches (the update of
// backend/optimizer.hpp's adam_step). step counts updates from 1.
template <class T>
void adam_step_multi(queue& q, std::span<const adam_tensor<T>> tensors, double lr, double beta1, double beta2,
                     double eps, double weight_decay, std::int64_t step, bool decoupled) {
  static_assert(detail::is_real_v<T>);
  if (step < 1) detail::fail("adam_step", "step counts updates from 1");
  for (const adam_tensor<T>& t : tensors)
    detail::need(t.n == 0 || (t.param && t.grad && t.m && t.v), "adam_step", "null pointer");
  // Scalars exactly as the host computes them (bias corrections in double).
  const auto s = math::adam_scalars<T>::make(lr, beta1, beta2, eps, weight_decay, step, decoupled);
  detail::launch_multi<T, 4>(
      q, tensors,
      [](const adam_tensor<T>& t) {
        return std::array<T*, 4>{t.param, const_cast<T*>(t.grad), t.m, t.v};  // grad is only read
      },
      [&](const detail::multi_args<T, 4>& a, std::uint32_t blocks) {
        detail::k_adam_multi<T><<<blocks, detail::multi_threads, 0, q.stream()>>>(a, s);
        STRATA_CUDA_CHECK_LAUNCH("k_adam_multi");
      });
}

// torch.optim.SGD (dampening 0, no Nesterov) over many tensors.
template <class T>
void sgd_momentum_step_multi(queue& q, std::span<const sgd_tensor<T>> tensors, double lr, double momentum,
                             double weight_decay) {
  static_assert(detail::is_real_v<T>);
  for (const sgd_tensor<T>& t : tensors)
    detail::need(t.n == 0 || (t.param && t.grad && (t.velocity || momentum == 0.0)), "sgd_momentum_step",
                 "null pointer");
  const auto s = math::sgd_scalars<T>::make(lr, momentum, weight_decay);
  detail::launch_multi<T, 3>(
      q, tensors, [](const sgd_tensor<T>& t) { return std::array<T*, 3>{t.param, const_cast<T*>(t.grad), t.velocity}; },
      [&](const detail::multi_args<T, 3>& a, std::uint32_t blocks) {
        detail::k_sgd_multi<T><<<blocks, detail::multi_threads, 0, q.stream()>>>(a, s);
        STRATA_CUDA_CHECK_LAUNCH("k_sgd_multi");
      });
}

// Static members on arguments the front has checked (impl::optimizer_kernels<queue>):
// one tensor is the multi-tensor kernel with a single entry.
struct optimizer_kernels {
  template <class T>
  static void sgd_momentum_step(queue& q, std::size_t n, double lr, double momentum, double weight_decay, T* param,
                                const T* grad, T* velocity) {
    const sgd_tensor<T> t{param, grad, velocity, n};
    sgd_momentum_step_multi<T>(q, std::span<const sgd_tensor<T>>(&t, 1), lr, momentum, weight_decay);
  }

  template <class T>
  static void adam_step(queue& q, std::size_t n, double lr, double beta1, double beta2, double eps,
                        double weight_decay, std::int64_t step, T* param, const T* grad, T* m, T* v, bool decoupled) {
    const adam_tensor<T> t{param, grad, m, v, n};
    adam_step_multi<T>(q, std::span<const adam_tensor<T>>(&t, 1), lr, beta1, beta2, eps, weight_decay, step,
                       decoupled);
  }
};

}  // namespace strata::backend::cuda

namespace strata::backend::impl {
template <>
struct optimizer_kernels<cuda::queue> : cuda::optimizer_kernels {};
}  // namespace strata::backend::impl
