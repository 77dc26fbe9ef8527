#pragma once
// The optimizer kernel family's front (dispatch.hpp): one fused pass per tensor over an
// optimizer's per-element update (core/optimizers.hpp: PyTorch's semantics and operation
// order). Implementations: host/optimizer.hpp, cuda/optimizer.cuh (which also updates many
// tensors in one launch: optimizer_update_multi).
#include <cstddef>
#include <cstdint>

#include "strata/backend/dispatch.hpp"
#include "strata/core/math.hpp"
#include "strata/core/optimizers.hpp"

namespace strata::backend {

namespace impl {
template <class Queue>
struct optimizer_kernels;
}  // namespace impl

inline namespace kernels {

// One optimizer update of n elements (Rule: an optimizer of core/optimizers.hpp):
//   Rule::update(param[i], grad[i], s0 + i, s1 + i, s) for every i,
// with s the update's scalars (Rule::prepare). The state arrays the rule keeps must be
// given (Adam: both moments; SGD: the momentum buffer when momentum != 0); the others may
// be null. grad is not modified.
template <class Rule, class T, kernel_queue Q>
void optimizer_update(Q& q, std::size_t n, const typename Rule::template scalars<T>& s, T* param, const T* grad,
                      T* s0, T* s1) {
  static_assert(detail::is_real_v<T>);
  if (n == 0) return;
  detail::need(param && grad, "optimizer_update", "null pointer");
  impl::optimizer_kernels<Q>::template update<Rule>(q, n, s, param, grad, s0, s1);
}

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
  const SGD o{.lr = lr, .momentum = momentum, .weight_decay = weight_decay};
  optimizer_update<SGD>(q, n, o.prepare<T>(1.0, true, 1), param, grad, velocity, static_cast<T*>(nullptr));
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
  const auto s = math::adam_scalars<T>::make(lr, beta1, beta2, eps, weight_decay, step, decoupled);
  optimizer_update<Adam>(q, n, s, param, grad, m, v);  // Adam's and AdamW's rule differ only in s
}

}  // namespace kernels

}  // namespace strata::backend
