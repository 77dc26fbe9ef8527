// strata-header: cuda-only
#pragma once
// strata CUDA backend, optimizers: the CUDA implementation of backend/optimizer.hpp, and
// the multi-tensor form it runs on (CUDA only: many tensors per launch), over the
// optimizers' element updates (core/optimizers.hpp).
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

// One tensor of a multi-tensor update: its parameters, gradients and the optimizer's
// state arrays (null where the optimizer keeps fewer).
template <class T>
struct update_tensor {
  T* param;
  const T* grad;
  T* s0;
  T* s1;
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

// Arrays: 0 param, 1 grad, 2 and 3 the optimizer's states (null where it keeps fewer;
// the same for every tensor of a launch). With both states, aligned vectors of W elements.
template <class Rule, class T>
__global__ void __launch_bounds__(multi_threads)
    k_update_multi(const __grid_constant__ multi_args<T, 4> a, const typename Rule::template scalars<T> s) {
  const int t = owning_tensor(a);
  T* p = a.ptr[0][t];
  const T* g = a.ptr[1][t];
  T* s0 = a.ptr[2][t];
  T* s1 = a.ptr[3][t];
  const std::size_t begin = std::size_t(blockIdx.x - a.first[t]) * multi_chunk;
  const std::size_t end = d_min(a.n[t], begin + multi_chunk);
  constexpr int W = vec_width<T>;
  const bool vec = s0 && s1 && aligned16(p) && aligned16(g) && aligned16(s0) && aligned16(s1);  // uniform per block
  std::size_t j = begin + threadIdx.x;
  if (vec) {
    std::size_t i = begin + std::size_t(threadIdx.x) * W;
    for (; i + W <= end; i += std::size_t(blockDim.x) * W) {
      T pv[W], gv[W], mv[W], vv[W];
      load<W>(p + i, pv);
      load<W>(g + i, gv);
      load<W>(s0 + i, mv);
      load<W>(s1 + i, vv);
#pragma unroll
      for (int k = 0; k < W; ++k) Rule::update(pv[k], gv[k], &mv[k], &vv[k], s);
      store<W>(p + i, pv);
      store<W>(s0 + i, mv);
      store<W>(s1 + i, vv);
    }
    j = begin + (end - begin) / W * W + threadIdx.x;  // the chunk's tail (< W elements, a tensor's last chunk)
  }
  for (; j < end; j += blockDim.x) {
    T pj = p[j];
    Rule::update(pj, g[j], s0 ? s0 + j : nullptr, s1 ? s1 + j : nullptr, s);
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

// One optimizer update (core/optimizers.hpp's Rule) over many tensors in few launches,
// with the update's scalars s (Rule::prepare). Every tensor of one call has the same
// state arrays (both, the first only, or none).
template <class Rule, class T>
void optimizer_update_multi(queue& q, std::span<const update_tensor<T>> tensors,
                            const typename Rule::template scalars<T>& s) {
  static_assert(detail::is_real_v<T>);
  for (const update_tensor<T>& t : tensors) detail::need(t.n == 0 || (t.param && t.grad), "optimizer_update", "null pointer");
  detail::launch_multi<T, 4>(
      q, tensors,
      [](const update_tensor<T>& t) {
        return std::array<T*, 4>{t.param, const_cast<T*>(t.grad), t.s0, t.s1};  // grad is only read
      },
      [&](const detail::multi_args<T, 4>& a, std::uint32_t blocks) {
        detail::k_update_multi<Rule, T><<<blocks, detail::multi_threads, 0, q.stream()>>>(a, s);
        STRATA_CUDA_CHECK_LAUNCH("k_update_multi");
      });
}

// Static members on arguments the front has checked (impl::optimizer_kernels<queue>):
// one tensor is the multi-tensor kernel with a single entry.
struct optimizer_kernels {
  template <class Rule, class T>
  static void update(queue& q, std::size_t n, const typename Rule::template scalars<T>& s, T* param, const T* grad,
                     T* s0, T* s1) {
    const update_tensor<T> t{param, grad, s0, s1, n};
    optimizer_update_multi<Rule, T>(q, std::span<const update_tensor<T>>(&t, 1), s);
  }
};

}  // namespace strata::backend::cuda

namespace strata::backend::impl {
template <>
struct optimizer_kernels<cuda::queue> : cuda::optimizer_kernels {};
}  // namespace strata::backend::impl
