#pragma once
// Optimizer settings; the update kernels live in the backends.
#include <variant>

namespace strata {

// PyTorch semantics: v = μ·v + g (+ wd·p); p −= lr·v.
struct SGD {
  double lr = 0.01;
  double momentum = 0.0;
  double weight_decay = 0.0;
};
// Adam with L2 weight decay folded into the gradient.
struct Adam {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};
// AdamW: decoupled weight decay.
struct AdamW {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

using optimizer = std::variant<SGD, Adam, AdamW>;

}  // namespace strata
