#pragma once
// strata host backend, optimizers: one fused pass per tensor over the element
// updates of strata/core/math.hpp (PyTorch's semantics and operation order).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/backend/host/launch.hpp"
#include "strata/core/math.hpp"

namespace strata::backend::host {

// ---------------------------------------------------------------------------
// Optimizers (one fused pass per tensor; PyTorch semantics and op order)
// ---------------------------------------------------------------------------

// torch.optim.SGD (dampening 0, no Nesterov):
//   g = grad + weight_decay * param
//   v = momentum * v + g ; g = v        (skipped when momentum == 0)
//   param -= lr * g
// velocity must start zeroed (PyTorch's first-step copy equals 0*mu + g) and
// may be null when momentum == 0. grad is not modified.
template <class T>
void sgd_momentum_step(queue& q, std::size_t n, double lr, double momentum, double weight_decay, T* param,
                       const T* grad, T* velocity) {
  static_assert(detail::is_real_v<T>);
  if (n == 0) return;
  detail::need(param && grad && (velocity || momentum == 0.0), "sgd_momentum_step", "null pointer");
  const auto s = math::sgd_scalars<T>::make(lr, momentum, weight_decay);
  detail::for_range(q, n, detail::grain, [&](std::size_t b, std::size_t e) {
    const auto sc = s;  // a local copy: stores through param/velocity cannot alias it, so the loop vectorises
    T unused = T(0);
    for (std::size_t i = b; i < e; ++i) math::sgd_update(param[i], grad[i], sc.use_mom ? velocity + i : &unused, sc);
  });
}

// torch.optim.Adam (decoupled == false) / AdamW (decoupled == true), step =
// number of this update, starting at 1; m, v start zeroed:
//   Adam:  g += weight_decay * param        AdamW: param *= 1 - lr * weight_decay
//   m = lerp(m, g, 1 - beta1)   v = beta2 * v + (1 - beta2) * g * g
//   param -= (lr / (1 - beta1^step)) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
// Bias corrections are computed in double, as PyTorch does on the host.
template <class T>
void adam_step(queue& q, std::size_t n, double lr, double beta1, double beta2, double eps, double weight_decay,
               std::int64_t step, T* param, const T* grad, T* m, T* v, bool decoupled) {
  static_assert(detail::is_real_v<T>);
  if (step < 1) detail::fail("adam_step", "step counts updates from 1");
  if (n == 0) return;
  detail::need(param && grad && m && v, "adam_step", "null pointer");
  const auto s = math::adam_scalars<T>::make(lr, beta1, beta2, eps, weight_decay, step, decoupled);
  detail::for_range(q, n, detail::grain, [&](std::size_t b, std::size_t e) {
    const auto sc = s;  // a local copy: stores through param/m/v cannot alias it, so the loop vectorises
    for (std::size_t i = b; i < e; ++i) math::adam_update(param[i], grad[i], m[i], v[i], sc);
  });
}

}  // namespace strata::backend::host
