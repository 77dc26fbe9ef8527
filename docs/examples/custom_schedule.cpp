// Every schedule, and schedules of your own. A schedule is a tag type carrying its builder,
// its name and its traits; the plan reads a built-in tag (PreferForward, PreferBackward,
// Interleaved<V>, ZeroBubbleH1, ZeroBubbleV) the same way as yours. Yours needs only a
// static build<stages, M, chunks>() returning a sched::program, and a name; its other
// traits — chunks per stage, a split backward, the V placement, its rules — default to one
// plain chunk (plan/schedule_traits.hpp). The built-in builders are building blocks:
// sched::gpipe<stages, M>(), sched::one_f_one_b<stages, M>(), sched::interleaved<stages,
// M, V>(), sched::zb_h1<stages, M>(), sched::zb_v<stages, M>(). The plan proves a custom
// schedule complete and deadlock-free like a built-in one, and then it trains: the
// executor runs whatever program the plan holds (checked below under mpiexec -n 2 against
// the same layers on one device).
// mpi-ranks: 1 2
#include <cstdio>
#include <exception>
#include <string_view>

#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>

using namespace strata;
using sched::instr;
using sched::op;

using Net = Pipeline<Replicate<1, Linear<32, 32>, ReLU>, Replicate<1, Linear<32, 32>, ReLU>,
                     Replicate<1, Linear<32, 32>, ReLU>, Replicate<1, Linear<32, 4>>>;
template <class S, int M = 8>
using With = Plan<Net, Loss<SoftmaxCrossEntropy>, MicroBatch<2>, NumMicroBatch<M>, Schedule<S>>;

// The built-in schedules: GPipe keeps every micro-batch's activations, 1F1B at most
// `stages` of them; both leave the same bubble, (p - 1) / (m + p - 1).
static_assert(With<PreferForward>::schedule_name == "GPipe (PreferForward)");
static_assert(With<PreferBackward>::schedule_name == "1F1B (PreferBackward)");
static_assert(With<PreferForward>::peak_in_flight(0) == 8 && With<PreferBackward>::peak_in_flight(0) == 4);
static_assert(With<PreferForward>::bubble == sched::fraction{3, 11} && With<PreferBackward>::bubble == sched::fraction{3, 11});
// Interleaved<2>: the four parts become two chunks on each of two stages.
using I = Plan<Net, Loss<SoftmaxCrossEntropy>, MicroBatch<2>, NumMicroBatch<4>, Schedule<Interleaved<2>>>;
static_assert(I::stages == 2 && I::chunks == 2 && I::deadlock_free);

// A custom schedule from the building blocks: GPipe while the micro-batches are few (the
// same bubble, no warm-up bookkeeping), 1F1B once memory matters.
struct Adaptive {
  static constexpr std::string_view name = "Adaptive (GPipe, or 1F1B past `stages` micro-batches)";
  template <int Stages, int M, int V>
  static constexpr auto build() {
    if constexpr (M <= Stages) return sched::gpipe<Stages, M>();
    else return sched::one_f_one_b<Stages, M>();
  }
};
static_assert(With<Adaptive, 2>::deadlock_free && With<Adaptive, 2>::peak_in_flight(0) == 2);
static_assert(With<Adaptive, 2>::schedule_name == Adaptive::name && With<Adaptive, 2>::chunks == 1);
static_assert(With<Adaptive, 16>::deadlock_free && With<Adaptive, 16>::peak_in_flight(0) == 4);

// A program written instruction by instruction: two stages, one micro-batch. Stage 0
// runs forward, sends the activation, waits for the gradient and runs backward; stage 1
// receives, runs forward and backward, and sends the gradient back.
struct ByHand {
  static constexpr std::string_view name = "ByHand";
  template <int Stages, int M, int V>
  static constexpr auto build() {
    static_assert(Stages == 2 && M == 1, "ByHand is written for 2 stages and 1 micro-batch");
    sched::program<2, sched::schedule_capacity(1, 1)> p{};
    p.micro_batches = 1;
    p.push(0, instr{op::forward, 0, 0, -1});
    p.push(0, instr{op::send_act, 0, 0, 1});
    p.push(0, instr{op::recv_grad, 0, 0, 1});
    p.push(0, instr{op::backward, 0, 0, -1});
    p.push(1, instr{op::recv_act, 0, 0, 0});
    p.push(1, instr{op::forward, 0, 0, -1});
    p.push(1, instr{op::backward, 0, 0, -1});
    p.push(1, instr{op::send_grad, 0, 0, 0});
    for (int s = 0; s < 2; ++s) {
      p.push(s, instr{op::reduce_grads, 0, 0, -1});
      p.push(s, instr{op::optimizer_step, 0, 0, -1});
    }
    return p;
  }
};
using Two = Pipeline<Replicate<1, Linear<32, 32>, ReLU>, Replicate<1, Linear<32, 4>>>;
using H = Plan<Two, Loss<SoftmaxCrossEntropy>, MicroBatch<2>, NumMicroBatch<1>, Schedule<ByHand>>;
static_assert(H::deadlock_free && H::bubble == sched::fraction{1, 2});
// The same order as 1F1B with one micro-batch, instruction for instruction.
using Ref = Plan<Two, Loss<SoftmaxCrossEntropy>, MicroBatch<2>, NumMicroBatch<1>, Schedule<PreferBackward>>;
static_assert(H::program.length[0] == Ref::program.length[0] && H::program.length[1] == Ref::program.length[1]);

// Both custom schedules train like one device (two processes: one per stage).
using A = Plan<Two, Loss<SoftmaxCrossEntropy>, MicroBatch<2>, NumMicroBatch<4>, Schedule<Adaptive>, Element<double>>;

int main(int argc, char** argv) {
  auto world = strata::init<Host>(argc, argv);
  if (world.size() % 2 != 0) {
    std::printf("the proofs above hold; run under mpiexec -n 2 to train the custom schedules\n");
    return 0;
  }
  try {
    const auto by_hand = verify::against_one_device<H, double>(world, SGD{.lr = 0.1}, 5, verify::random_data<H>());
    const auto adaptive = verify::against_one_device<A>(world, Adam{.lr = 1e-2}, 5, verify::random_data<A>());
    if (world.rank() == 0) std::printf("ByHand: %sAdaptive: %s", by_hand.text().c_str(), adaptive.text().c_str());
    return by_hand.ok() && adaptive.ok() ? 0 : 1;
  } catch (const std::exception& e) {
    return world.fail(e);
  }
}
