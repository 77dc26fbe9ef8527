// The lowered program and buffer plan (plan/lower.hpp), and the analyses that read them.
#include <strata/strata.hpp>

using namespace strata;

using CE = Loss<SoftmaxCrossEntropy>;

// Messages pair up: what a part sends is what the next part receives, both ways.
template <class P>
constexpr bool messages_pair() {
  const auto& T = P::lowering::tables;
  for (int p = 0; p + 1 < P::num_parts; ++p) {
    const auto &a = T.parts[p], &b = T.parts[p + 1];
    if (a.stage == b.stage) continue;  // one stage: in place
    if (a.exit.elems != b.entry.elems || a.gout.elems != b.gin.elems) return false;
  }
  return true;
}
using PP = Plan<Pipeline<Split<2, Linear<16, 32>, ReLU, Linear<32, 16>>, Split<2, Linear<16, 32>, ReLU, Linear<32, 4>>>,
                CE, MicroBatch<4>, NumMicroBatch<4>>;
using S = Replicate<1, Linear<16, 16>, ReLU>;
using IL = Plan<Pipeline<S, S, S, Replicate<1, Linear<16, 4>>>, CE, MicroBatch<2>, NumMicroBatch<8>,
                Schedule<Interleaved<2>>>;
static_assert(messages_pair<PP>() && messages_pair<IL>());
// Part 0 of PP ends with a row-parallel Linear: it sends partial sums (4 × 16 per device),
// part 1 all-reduces them in place as its first step.
static_assert(PP::lowering::tables.parts[0].exit.elems == 4 * 16);
static_assert(PP::lowering::tables.steps[PP::lowering::tables.parts[1].fwd_begin].kind == lower::act::convert);

// Every slot a stage uses is counted: 1F1B keeps p − s micro-batches in flight on stage s.
static_assert(IL::lowering::slots(sched::pool_kind::act, 0) == 4);
using P4 = Plan<Pipeline<S, S, S, Replicate<1, Linear<16, 4>>>, CE, MicroBatch<2>, NumMicroBatch<8>>;
static_assert(P4::lowering::slots(sched::pool_kind::act, 0) == 4 && P4::lowering::slots(sched::pool_kind::act, 3) == 1);
static_assert(P4::peak_activation_bytes(0) == 4 * P4::stash_bytes(0));

// The final backward of each part carries its gradient buckets: marked once per part.
template <class P>
constexpr int lasts(int stage) {
  int n = 0;
  for (int i = 0; i < P::lowered_program.prog.length[stage]; ++i) n += P::lowered_program.prog.at(stage, i).last;
  return n;
}
static_assert(lasts<IL>(0) == 2 && lasts<IL>(1) == 2 && lasts<P4>(2) == 1);

// Stash per device from whole rows: Replicate<4> splits a micro-batch of 4 into one
// sample per device, and each keeps that row (the per-sample estimate used to round a
// 2-feature layer's share down to zero).
using R4 = Plan<Replicate<4, Linear<2, 2>, ReLU, Linear<2, 2>>, CE, MicroBatch<4>>;
static_assert(R4::lowering::tables.calls[0].dims.rows == 1);
// entry (kept by Linear) 2 + ReLU's input 2 + the last Linear's input 2 + the probabilities 2
static_assert(R4::stash_bytes(0) == (2 + 2 + 2 + 2) * 4);

// Communication with the data-parallel degree: one replica reduces no gradients over
// data; two do; a plan fixing World<1> lists none by default.
using DP = Plan<Replicate<1, Linear<8, 4>>, CE, MicroBatch<4>>;
static_assert(DP::communication(0, 1).size == 0);
static_assert(DP::communication(0, 2).size == 1 && DP::communication(0, 2).rows[0].group == group_axis::data);
using DP1 = Plan<Replicate<1, Linear<8, 4>>, CE, MicroBatch<4>, World<1>>;
static_assert(DP1::communication(0).size == 0);
// Replicate<2> still reduces over its two devices with one replica.
using R2 = Plan<Replicate<2, Linear<8, 4>>, CE, MicroBatch<4>>;
static_assert(R2::communication(0, 1).size == 1 && R2::communication(0, 1).rows[0].group == group_axis::part_data);

// The bubble is a fraction in lowest terms.
using B = Plan<Pipeline<S, Replicate<1, Linear<16, 4>>>, CE, MicroBatch<2>, NumMicroBatch<4>>;
static_assert(B::bubble.num == 1 && B::bubble.den == 5);

int main() { return 0; }
