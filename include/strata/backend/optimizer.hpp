#pragma once
// The optimizer kernel family's front (dispatch.hpp): one fused pass per tensor over the
// element updates of strata/core/math.hpp (PyTorch's semantics and operation order).
// Implementations: host/optimizer.hpp, cuda/optimizer.cuh (which also updates many
// tensors in one launch: adam_step_multi, sgd_momentum_step_multi).
#include <cstddef>
#include <cstdint>

#include "strata/backend/dispatch.hpp"

namespace strata::backend {

namespace impl {
template <class Queue>
struct optimizer_kernels;
}  // namespace impl

inline namespace kernels {

// torch.optim.SGD (dampening 0, no Nesterov):
//   g = grad + weight_decay * param
//   v = momentum * v + g ; g = v        (skipped when momentum == 0)
//   param -= lr * g
// velocity must start zeroed (PyTorch's first-step copy equals 0*mu + g) and may be null
// when momentum == 0. grad is not modified.
template <class T, kernel_queue Q>
void sgd_momentum_step(Q& q, std::size_t n, double lr, double momentum, double weight_decay, T* param, const T* grad,
                       T* velocity) {
  static_assert(detail::is_real_v<T>);
  if (n == 0) return;
  detail::need(param && grad && (velocity || momentum == 0.0), "sgd_momentum_step", "null pointer");
  impl::optimizer_kernels<Q>::sgd_momentum_step(q, n, lr, momentum, weight_decay, param, grad, velocity);
}

// torch.optim.Adam (decoupled == false) / AdamW (decoupled == true), step = number of
// this update, starting at 1; m, v start zeroed:
//   Adam:  g += weight_decay * param        AdamW: param *= 1 - lr * weight_decay
//   m = lerp(m, g, 1 - beta1)   v = beta2 * v + (1 - beta2) * g * g
//   param -= (lr / (1 - beta1^step)) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
// Bias corrections are computed in double, as PyTorch does on the host.
template <class T, kernel_queue Q>
void adam_step(Q& q, std::size_t n, double lr, double beta1, double beta2, double eps, double weight_decay,
               std::int64_t step, T* param, const T* grad, T* m, T* v, bool decoupled) {
  static_assert(detail::is_real_v<T>);
  if (step < 1) detail::fail("adam_step", "step counts updates from 1");
  if (n == 0) return;
  detail::need(param && grad && m && v, "adam_step", "null pointer");
  impl::optimizer_kernels<Q>::adam_step(q, n, lr, beta1, beta2, eps, weight_decay, step, param, grad, m, v,
                                        decoupled);
}

}  // namespace kernels

}  // namespace strata::backend
