// Why the schedules group their sends and receives, and how a plan proves it.
// Two stages, two micro-batches, 1F1B order. Under rendezvous send/recv (a send
// finishes only when the peer posts the receive) the obvious program deadlocks.
#include <string_view>

#include <strata/strata.hpp>

using namespace strata;
using sched::instr;
using sched::op;

template <bool Grouped>
constexpr auto two_stage_1f1b() {
  sched::program<2, 16> p{};
  p.micro_batches = 2;
  // stage 0: F0 send0 F1 [send1 recv-grad0] B0 recv-grad1 B1
  p.push(0, instr{op::forward, 0, 0, -1, false});
  p.push(0, instr{op::send_act, 0, 0, 1, false});
  p.push(0, instr{op::forward, 1, 0, -1, false});
  p.push(0, instr{op::send_act, 1, 0, 1, Grouped});  // Grouped: posted together with the next
  p.push(0, instr{op::recv_grad, 0, 0, 1, false});
  p.push(0, instr{op::backward, 0, 0, -1, false});
  p.push(0, instr{op::recv_grad, 1, 0, 1, false});
  p.push(0, instr{op::backward, 1, 0, -1, false});
  // stage 1: recv0 F0 B0 send-grad0 recv1 F1 B1 send-grad1
  p.push(1, instr{op::recv_act, 0, 0, 0, false});
  p.push(1, instr{op::forward, 0, 0, -1, false});
  p.push(1, instr{op::backward, 0, 0, -1, false});
  p.push(1, instr{op::send_grad, 0, 0, 0, false});
  p.push(1, instr{op::recv_act, 1, 0, 0, false});
  p.push(1, instr{op::forward, 1, 0, -1, false});
  p.push(1, instr{op::backward, 1, 0, -1, false});
  p.push(1, instr{op::send_grad, 1, 0, 0, false});
  return p;
}

// Both programs run every forward and backward exactly once...
static_assert(sched::check_complete(two_stage_1f1b<false>()).status == sched::verdict::ok);
// ...but one-at-a-time posting blocks: stage 0 waits in "send mb 1" (instruction 3)
// while stage 1 waits in "send gradient of mb 0".
constexpr auto blocked = sched::simulate(two_stage_1f1b<false>());
static_assert(blocked.status == sched::verdict::deadlock && blocked.stage == 0 && blocked.instruction == 3);
// Posting "send mb 1" and "receive gradient of mb 0" as one group makes progress.
static_assert(sched::simulate(two_stage_1f1b<true>()).status == sched::verdict::ok);

// The built-in schedules emit such groups; every plan runs the same simulation.
using Net = Pipeline<Replicate<1, Linear<64, 64>>, Replicate<1, Linear<64, 64>>>;
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, NumMicroBatch<2>, Schedule<PreferBackward>>;
static_assert(P::deadlock_free);
static_assert(P::program.at(0, 3).kind == op::send_act && P::program.at(0, 3).group_next);
static_assert(P::program.at(0, 4).kind == op::recv_grad);

// A custom schedule: a tag with a name and a build<stages, M, chunks>() returning a
// sched::program. The plan checks it like a built-in one.
struct MyGPipe {
  static constexpr std::string_view name = "MyGPipe";
  template <int Stages, int M, int V>
  static constexpr auto build() {
    return sched::gpipe<Stages, M>();
  }
};
using C = Plan<Net, Loss<SoftmaxCrossEntropy>, NumMicroBatch<4>, Schedule<MyGPipe>>;
static_assert(C::deadlock_free && C::bubble == sched::fraction{1, 5});

int main() { return 0; }
