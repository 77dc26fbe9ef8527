#pragma once
// What verify::against_one_device reports: one comparison of a plan with its one-device
// reference (losses, parameters, an evaluation, bytes, buffers, replicas), and the
// report — the plan's arithmetic checked in float64 and, for another element type, the
// same comparison in that precision against a bound the precision and the optimizer
// allow, with the reason.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>

#include "strata/core/bf16.hpp"
#include "strata/core/f16.hpp"
#include "strata/exec/optimizer.hpp"
#include "strata/exec/replicas.hpp"

namespace strata::verify {

// Relative tolerance for losses and parameters, by the element type trained in.
template <class T>
constexpr double default_tolerance() {
  if constexpr (std::is_same_v<T, double>) return 1e-9;
  else if constexpr (std::is_same_v<T, float>) return 1e-4;
  else if constexpr (std::is_same_v<T, f16>) return 1e-2;  // f16 activations (10-bit mantissa)
  else return 3e-2;  // bf16 activations
}

template <class T>
constexpr const char* element_name() {
  if constexpr (std::is_same_v<T, double>) return "float64";
  else if constexpr (std::is_same_v<T, float>) return "float32";
  else if constexpr (std::is_same_v<T, f16>) return "f16";
  else return "bf16";
}

// The most one Adam update can move an element, in units of its learning rate, whatever
// the gradients: with m̂_t = (1−β1)/(1−β1^t)·Σ β1^(t−i) g_i and v̂_t = (1−β2)/(1−β2^t)·Σ
// β2^(t−i) g_i², Cauchy–Schwarz over the weights gives |m̂_t|/√v̂_t ≤
// (1−β1)/(1−β1^t)·√((1−β2^t)/(1−β2))·√(Σ_{k<t} (β1²/β2)^k); ε only lowers it.
inline double adam_update_bound(double beta1, double beta2, long long t) {
  double sum = 0, rk = 1;
  const double r = beta1 * beta1 / beta2;
  for (long long k = 0; k < t; ++k, rk *= r) sum += rk;
  const double td = static_cast<double>(t);
  return (1 - beta1) / (1 - std::pow(beta1, td)) * std::sqrt((1 - std::pow(beta2, td)) / (1 - beta2)) *
         std::sqrt(sum);
}

// How far two runs of `steps` updates may move any element apart while doing the same
// arithmetic in different rounding: an adaptive optimizer normalises each element's step,
// so rounding noise on an element whose true gradient is near zero becomes a full-size
// update in a random direction; each run then moves it at most lr·factor(s)·bound_s per
// update (decoupled weight decay only shrinks the difference). Zero (no per-element
// bound: the relative tolerance alone) for SGD, whose steps follow the gradient's size.
struct element_bound {
  double bound = 0;
  std::string reason;
};

inline element_bound element_bound_of(const optimizer& opt, int steps, const lr_schedule& schedule) {
  return std::visit(
      [&]<class O>(const O& o) -> element_bound {
        if constexpr (std::is_same_v<O, SGD>) {
          return {};
        } else {
          double total = 0, c = 0;  // c: the largest bound of updates 1 .. s
          for (long long s = 1; s <= steps; ++s) {
            c = std::max(c, adam_update_bound(o.beta1, o.beta2, s));  // a skipped update only lowers t
            total += 2 * o.lr * std::max(0.0, schedule.factor(s)) * c;
          }
          char line[320];
          std::snprintf(line, sizeof line,
                        "%s moves every element by up to %.2f x lr per update whatever its gradient, so the "
                        "rounding of a gradient near zero can move it by up to %.2e in %d updates of lr %.1e",
                        std::string(O::name).c_str(), c, total, steps, o.lr);
          return {total, line};
        }
      },
      opt);
}

// One comparison of a plan (element type `element`) with its one-device reference
// (`reference`). A parameter tensor agrees when its relative L2 error is within
// `tolerance` or, where the optimizer allows noise of a fixed size (element_bound), when
// no element differs by more than `element_bound`.
struct comparison {
  std::string element = "float64", reference = "float64";
  double tolerance = 0;
  double element_bound = 0;  // 0: the relative tolerance alone
  std::string bound_reason;
  double worst_loss = 0, worst_param = 0, worst_eval = 0;  // relative errors
  std::string worst_param_tensor;
  double worst_element = 0;  // the largest element difference of a tensor beyond `tolerance`
  std::string worst_element_tensor;
  std::string first_difference;  // the first step and value beyond what is allowed
  double eval_loss = 0, eval_loss_reference = 0;
  long long eval_rows = 0, eval_correct = 0, eval_correct_reference = 0;
  bool bytes_as_planned = true, buffers_as_planned = true;
  std::string bytes_difference;
  replica_report replicas;
  bool eval_correct_ok = true;  // the same correct rows (up to 1% argmax flips unless all double)

  bool ok() const {
    return first_difference.empty() && worst_eval <= tolerance && eval_correct_ok && bytes_as_planned &&
           buffers_as_planned && replicas.identical;
  }
  std::string lines(const char* indent) const {
    char line[512];
    std::string s;
    std::snprintf(line, sizeof line, "%sworst loss %.3e, worst parameter %.3e (%s), evaluation loss %.3e\n", indent,
                  worst_loss, worst_param, worst_param_tensor.c_str(), worst_eval);
    s += line;
    if (element_bound > 0 && !worst_element_tensor.empty()) {
      std::snprintf(line, sizeof line, "%sbeyond the relative tolerance: %s, by at most %.3e per element (bound %.3e)\n",
                    indent, worst_element_tensor.c_str(), worst_element, element_bound);
      s += line;
    }
    std::snprintf(line, sizeof line, "%sevaluation of %lld rows: loss %.6f, one device %.6f; correct %lld, one device %lld\n",
                  indent, eval_rows, eval_loss, eval_loss_reference, eval_correct, eval_correct_reference);
    s += line;
    s += std::string(indent) + "bytes per collective as planned: " + (bytes_as_planned ? "yes" : "no") +
         bytes_difference + "\n";
    s += std::string(indent) + "activation buffers as planned: " + (buffers_as_planned ? "yes" : "no") + "\n";
    s += std::string(indent) + "replicas identical: " +
         (replicas.identical ? std::string("yes") : "no: " + replicas.first_difference) + " (" +
         std::to_string(replicas.tensors_compared) + " tensors)\n";
    if (!first_difference.empty()) s += std::string(indent) + "first difference: " + first_difference + "\n";
    return s;
  }
};

// The verdict. Its own fields are the plan's arithmetic in float64 against one device in
// float64 — layouts, collectives and schedule are those of any element type, so a wrong
// collective or scale shows here whatever the precision trained in. `precision` holds the
// run in the caller's element types when they are not both float64, judged against the
// tolerance of that precision and the optimizer's element bound.
struct report : comparison {
  int world = 1, data_parallel = 1, steps = 0;
  long long global_batch = 0;
  std::optional<comparison> precision;

  bool ok() const { return comparison::ok() && (!precision || precision->ok()); }
  std::string text() const {
    char line[256];
    std::string s = ok() ? "strata verify: OK" : "strata verify: FAILED";
    std::snprintf(line, sizeof line, " (world %d, data parallel %d, global batch %lld, %d steps)\n", world,
                  data_parallel, global_batch, steps);
    s += line;
    std::snprintf(line, sizeof line, "  the plan in %s against one device in %s (tolerance %.1e): %s\n",
                  element.c_str(), reference.c_str(), tolerance, comparison::ok() ? "equal" : "DIFFERENT");
    s += line;
    s += lines("    ");
    if (precision) {
      const comparison& p = *precision;
      std::snprintf(line, sizeof line, "  in %s against one device in %s (tolerance %.1e", p.element.c_str(),
                    p.reference.c_str(), p.tolerance);
      s += line;
      if (p.element_bound > 0) {
        std::snprintf(line, sizeof line, ", or %.2e per element", p.element_bound);
        s += line;
      }
      s += std::string("): ") + (p.ok() ? "within the bound" : "BEYOND THE BOUND") + "\n";
      if (!p.bound_reason.empty()) s += "    why a per-element bound: " + p.bound_reason + "\n";
      s += p.lines("    ");
    }
    return s;
  }
};

}  // namespace strata::verify
