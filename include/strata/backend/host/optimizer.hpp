#pragma once
// strata host backend, optimizers: the host implementation of backend/optimizer.hpp, one
// fused pass per tensor over the element updates of strata/core/math.hpp.
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
#include "strata/backend/optimizer.hpp"
#include "strata/core/math.hpp"

namespace strata::backend::host {

// Static members on arguments the front has checked (impl::optimizer_kernels<queue>).
// Each task copies the scalars: stores through param, m, v cannot alias a local, so the
// loops vectorise.
struct optimizer_kernels {
  template <class T>
  static void sgd_momentum_step(queue& q, std::size_t n, double lr, double momentum, double weight_decay, T* param,
                                const T* grad, T* velocity) {
    const auto s = math::sgd_scalars<T>::make(lr, momentum, weight_decay);
    detail::for_range(q, n, detail::grain, [&](std::size_t b, std::size_t e) {
      const auto sc = s;
      T unused = T(0);
      for (std::size_t i = b; i < e; ++i) math::sgd_update(param[i], grad[i], sc.use_mom ? velocity + i : &unused, sc);
    });
  }

  template <class T>
  static void adam_step(queue& q, std::size_t n, double lr, double beta1, double beta2, double eps,
                        double weight_decay, std::int64_t step, T* param, const T* grad, T* m, T* v, bool decoupled) {
    const auto s = math::adam_scalars<T>::make(lr, beta1, beta2, eps, weight_decay, step, decoupled);
    detail::for_range(q, n, detail::grain, [&](std::size_t b, std::size_t e) {
      const auto sc = s;
      for (std::size_t i = b; i < e; ++i) math::adam_update(param[i], grad[i], m[i], v[i], sc);
    });
  }
};

}  // namespace strata::backend::host

namespace strata::backend::impl {
template <>
struct optimizer_kernels<host::queue> : host::optimizer_kernels {};
}  // namespace strata::backend::impl
