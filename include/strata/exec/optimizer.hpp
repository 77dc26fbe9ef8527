#pragma once
// The optimizer a trainer runs, and what the trainer does around its update: the
// learning-rate schedule, weight-decay groups, clipping.
#include <cmath>
#include <numbers>
#include <variant>

#include "strata/core/optimizers.hpp"

namespace strata {

// The optimizers a trainer takes (each defined in core/optimizers.hpp).
using optimizer = std::variant<SGD, Adam, AdamW>;

// The learning rate of update s (counted from 1) is lr · factor(s): a linear warm-up
// from lr/warmup to lr over the first `warmup` updates, then a decay over the updates up
// to `total` to final_ratio · lr (linear, or half a cosine), and final_ratio · lr after.
struct lr_schedule {
  enum class decay : unsigned char { constant, linear, cosine };
  decay kind = decay::constant;
  long long warmup = 0;
  long long total = 0;  // the last update of the decay (linear and cosine)
  double final_ratio = 0.0;

  constexpr double factor(long long s) const {
    if (s <= warmup) return double(s) / double(warmup);  // warmup > 0 here (s >= 1)
    if (kind == decay::constant) return 1.0;
    const long long span = total - warmup;
    const double p = span <= 0 ? 1.0 : std::fmin(1.0, double(s - warmup) / double(span));
    const double shape = kind == decay::linear ? 1.0 - p : 0.5 * (1.0 + std::cos(std::numbers::pi * p));
    return final_ratio + (1.0 - final_ratio) * shape;
  }
};

// Which tensors the weight decay applies to: all, or only matrices and embeddings (rank
// >= 2: no decay on biases and LayerNorm's gain and shift, as GPT recipes do).
enum class decay_on : unsigned char { all, matrices };

// What the trainer does around the optimizer's update, besides the optimizer itself.
struct training_options {
  lr_schedule schedule{};
  decay_on decay = decay_on::all;
  // Global-norm clipping after the gradient reduction (EPL's communication.
  // clip_after_allreduce, torch.nn.utils.clip_grad_norm_): every gradient is multiplied
  // by min(1, clip_norm / (‖g‖ + 1e-6)), ‖g‖ over every parameter of the model counted
  // once whatever the plan. 0: off.
  double clip_norm = 0.0;
  // Loss scaling's log (EPL's amp.debug_log): rank 0 prints a line for every skipped step
  // and every change of the scale.
  bool loss_scale_log = false;
};

}  // namespace strata
