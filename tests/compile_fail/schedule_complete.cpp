// Rule schedule-complete: a custom schedule takes 1F1B and drops the backward of
// micro-batch 2 on stage 1, so that stage never runs it; the check reports stage 1
// at instruction 17, the end of its (now 17-instruction) program.
// expected-error: strata rule \[schedule-complete\]
// expected-error: schedule_complete<(1, 17>|Stage, Instruction> \[with Stage=1, Instruction=17\])
#include <cstddef>
#include <string_view>

#include <strata/strata.hpp>

using namespace strata;

struct DroppedBackward {
  static constexpr std::string_view name = "1F1B without one backward";
  template <int P, int M, int V>
  static constexpr auto build() {
    auto prog = sched::one_f_one_b<P, M>();
    auto& code = prog.code[P - 1];
    auto& len = prog.length[P - 1];
    for (std::size_t i = 0; i < static_cast<std::size_t>(len); ++i)
      if (code[i].kind == sched::op::backward && code[i].mb == 2) {
        for (std::size_t j = i; j + 1 < static_cast<std::size_t>(len); ++j) code[j] = code[j + 1];
        --len;
        break;
      }
    return prog;
  }
};

using Net = Pipeline<Replicate<1, Flatten, Linear<784, 1000>, ReLU>, Replicate<1, Linear<1000, 10>>>;
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, NumMicroBatch<4>, Schedule<DroppedBackward>>;
static_assert(P::valid);
