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
// Each task copies the scalars: stores through the parameters and states cannot alias a
// local, so the loops vectorise; which state arrays there are is decided outside them.
struct optimizer_kernels {
  template <class Rule, class T>
  static void update(queue& q, std::size_t n, const typename Rule::template scalars<T>& s, T* param, const T* grad,
                     T* s0, T* s1) {
    detail::for_range(q, n, detail::grain, [&](std::size_t b, std::size_t e) {
      const auto sc = s;
      if (s0 && s1)
        for (std::size_t i = b; i < e; ++i) Rule::update(param[i], grad[i], s0 + i, s1 + i, sc);
      else if (s0)
        for (std::size_t i = b; i < e; ++i) Rule::update(param[i], grad[i], s0 + i, static_cast<T*>(nullptr), sc);
      else
        for (std::size_t i = b; i < e; ++i)
          Rule::update(param[i], grad[i], static_cast<T*>(nullptr), static_cast<T*>(nullptr), sc);
    });
  }
};

}  // namespace strata::backend::host

namespace strata::backend::impl {
template <>
struct optimizer_kernels<host::queue> : host::optimizer_kernels {};
}  // namespace strata::backend::impl
