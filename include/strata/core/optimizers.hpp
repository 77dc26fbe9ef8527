#pragma once
// The optimizers. Each is one type: its hyper-parameters (PyTorch's names and defaults),
// its name and the state tensors it keeps per parameter (PyTorch's state_dict names, which
// checkpoints use), the scalars of one update (prepare), and its per-element update,
// written once for host and device code (update; the formulas of core/math.hpp). Every
// backend runs any of them through one kernel (backend/optimizer.hpp's optimizer_update),
// the parameter store through one call, checkpoints by the names here: a new optimizer is
// a type like these and its place in exec/optimizer.hpp's variant.
#include <array>
#include <cstdint>
#include <string_view>

#include "strata/core/hd.hpp"
#include "strata/core/math.hpp"

namespace strata {

// torch.optim.SGD (dampening 0, no Nesterov): v = μ·v + g (+ wd·p); p −= lr·v.
struct SGD {
  double lr = 0.01;
  double momentum = 0.0;
  double weight_decay = 0.0;

  static constexpr std::string_view name = "SGD";
  static constexpr std::array<std::string_view, 2> state_names{"momentum_buffer", ""};
  constexpr int states() const { return momentum != 0.0 ? 1 : 0; }
  template <class T>
  using scalars = math::sgd_scalars<T>;
  // One update's scalars: the learning rate times lr_factor, weight decay where `decays`.
  template <class T>
  scalars<T> prepare(double lr_factor, bool decays, std::int64_t /*step*/) const {
    return scalars<T>::make(lr * lr_factor, momentum, decays ? weight_decay : 0.0);
  }
  // s0: the momentum buffer (null without momentum).
  template <class T>
  STRATA_HD static void update(T& p, T g, T* s0, T* /*s1*/, const scalars<T>& s) {
    math::sgd_update(p, g, s0, s);
  }
};

// torch.optim.Adam (Decoupled = false: L2 weight decay folded into the gradient) and
// torch.optim.AdamW (Decoupled = true: decoupled weight decay); updates count from 1.
template <bool Decoupled>
struct adam_optimizer {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = Decoupled ? 0.01 : 0.0;

  static constexpr std::string_view name = Decoupled ? "AdamW" : "Adam";
  static constexpr std::array<std::string_view, 2> state_names{"exp_avg", "exp_avg_sq"};
  constexpr int states() const { return 2; }
  template <class T>
  using scalars = math::adam_scalars<T>;
  template <class T>
  scalars<T> prepare(double lr_factor, bool decays, std::int64_t step) const {
    return scalars<T>::make(lr * lr_factor, beta1, beta2, eps, decays ? weight_decay : 0.0, step, Decoupled);
  }
  // s0, s1: the first and second moments.
  template <class T>
  STRATA_HD static void update(T& p, T g, T* s0, T* s1, const scalars<T>& s) {
    math::adam_update(p, g, *s0, *s1, s);
  }
};
using Adam = adam_optimizer<false>;
using AdamW = adam_optimizer<true>;

}  // namespace strata
