// Rule deadlock-free: a custom schedule takes 1F1B on 2 stages and, on stage 0, swaps
// the send of micro-batch 0's activation with the receive of micro-batch 0's gradient
// (group boundaries stay where they were; every compute still follows what it
// consumes). Stage 0 now waits at instruction 1 for a gradient while stage 1 waits for
// the activation stage 0 has not sent: both only receive, so nothing ever pairs up.
// expected-error: strata rule \[deadlock-free\]
// expected-error: deadlock_free<(0, 1>|Stage, Instruction> \[with Stage=0, Instruction=1\])
#include <cstddef>
#include <string_view>

#include <strata/strata.hpp>

using namespace strata;

struct SwappedOneFOneB {
  static constexpr std::string_view name = "1F1B, stage 0's first send and receive swapped";
  template <int P, int M, int V>
  static constexpr auto build() {
    auto prog = sched::one_f_one_b<P, M>();
    auto& code = prog.code[0];
    const auto len = static_cast<std::size_t>(prog.length[0]);
    std::size_t send = len, recv = len;  // first send-act and first recv-grad of stage 0
    for (std::size_t i = 0; i < len; ++i) {
      if (send == len && code[i].kind == sched::op::send_act) send = i;
      if (recv == len && code[i].kind == sched::op::recv_grad) recv = i;
    }
    if (send < len && recv < len) {  // swap what the two instructions do, not their grouping
      const sched::instr s = code[send];
      code[send].kind = code[recv].kind;
      code[send].mb = code[recv].mb;
      code[send].peer = code[recv].peer;
      code[recv].kind = s.kind;
      code[recv].mb = s.mb;
      code[recv].peer = s.peer;
    }
    return prog;
  }
};

using Net = Pipeline<Replicate<1, Flatten, Linear<784, 1000>, ReLU>, Replicate<1, Linear<1000, 10>>>;
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, NumMicroBatch<4>, Schedule<SwappedOneFOneB>>;
static_assert(P::valid);
