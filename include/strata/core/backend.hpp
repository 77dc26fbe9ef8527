#pragma once
// The Backend concept: what the executor and the built-in layers need from a backend
// (Kokkos' execution space idea). Every backend is checked against it where it is
// defined (backend/host/backend.hpp, backend/cuda/kernels.cuh), so a backend that lacks
// a kernel family fails there, not deep inside a trainer.
//
// Memory and ordering: B::queue (an ordered stream of work), B::event, B::buffer<T>
// (owning, move-only), B::allocate<T>(n), B::upload/download between host memory and
// backend memory, B::synchronize(q). Kernels are free functions taking the queue first,
// found by argument-dependent lookup on its type: one front per kernel family
// (backend/<family>.hpp, documented there) dispatching to each backend's implementation
// (backend/dispatch.hpp).
#include <concepts>
#include <cstddef>
#include <cstdint>

#include "strata/core/kernel_args.hpp"

namespace strata {

namespace detail {
template <class B, class T>
concept backend_kernels_for = requires(typename B::queue& q, T* p, const T* c, double* d, std::int32_t* ids,
                                       const std::int32_t* cids, std::size_t n, double a) {
  // elementwise
  fill(q, n, T(0), p);
  copy(q, n, c, p);
  copy_2d(q, n, n, c, n, p, n);
  scale(q, n, a, p);
  axpy(q, n, a, c, p);
  bias_activation_forward(q, backend::activation::relu, n, n, c, c, p, p);
  activation_backward(q, backend::activation::gelu, n, c, c, p);
  cast_ids(q, n, c, ids);
  // reductions
  { sum(q, n, c) } -> std::convertible_to<double>;
  { all_finite(q, n, c) } -> std::convertible_to<bool>;
  bias_grad(q, n, n, c, p, true);
  // GEMM
  gemm(q, backend::trans::N, backend::trans::T, n, n, n, T(1), c, n, c, n, T(0), p, n);
  gemm_bias_act(q, backend::trans::N, backend::trans::N, n, n, n, T(1), c, n, c, n, T(0), p, n, c,
                backend::activation::none, p);
  // normalization
  layernorm_forward(q, n, n, c, c, c, a, p, p, p);
  layernorm_backward(q, n, n, c, c, c, c, c, p, p, p, true);
  // softmax / loss
  softmax_cross_entropy_forward(q, n, n, c, cids, p, p);
  softmax_cross_entropy_backward(q, n, n, c, cids, a, p);
  xent_local_max(q, n, n, c, p);
  xent_local_sumexp(q, n, n, c, c, p);
  xent_target_logit(q, n, n, c, cids, n, p);
  xent_loss(q, n, c, c, c, p);
  xent_local_backward(q, n, n, c, cids, n, c, c, a, p);
  loss_accumulate(q, n, n, cids, c, c, c, d);
  // embedding
  embedding_forward(q, n, n, cids, c, n, n, p);
  embedding_backward(q, n, n, cids, c, n, n, p, true);
  segment_ids(q, n, n, cids, std::int32_t(0), std::int32_t(1), ids);
  // optimizers
  sgd_momentum_step(q, n, a, a, a, p, c, p);
  adam_step(q, n, a, a, a, a, a, std::int64_t(1), p, c, p, p, true);
};
}  // namespace detail

template <class B>
concept Backend = requires(typename B::queue& q, const float* c, float* p, std::size_t n, typename B::event e) {
  typename B::queue;
  typename B::event;
  typename B::template buffer<float>;
  { B::template allocate<float>(n) } -> std::same_as<typename B::template buffer<float>>;
  B::upload(q, c, n, p);
  B::download(q, c, n, p);
  B::synchronize(q);
  { B::record(q) } -> std::convertible_to<typename B::event>;
  B::wait(q, e);
} && detail::backend_kernels_for<B, float> && detail::backend_kernels_for<B, double>;

}  // namespace strata
