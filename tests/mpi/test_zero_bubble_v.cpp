// ZeroBubbleV places two Pipeline parts on each stage in a V (stage s: parts s and
// 2p − 1 − s; the first and the last part on stage 0, the turn between parts p − 1 and p
// handed over in place on stage p − 1) and splits every backward into B and W. A plan
// under it trains to the same losses and parameters as the model on one device (float64
// within 1e-9, bytes per collective as planned), and to exactly the same bits as the same
// parts under interleaved 1F1B (Interleaved<2>: the same devices, the other placement) —
// each gradient sums the same micro-batches in the same order. A GPT in four parts over
// two stages (with data and tensor parallelism on four ranks), the same in two parts on
// one device (only the turn), and an MLP in eight parts over four stages. DualPipeV (the
// same V in DualPipe's fixed order) the same way.
// mpi-ranks: 1 2 4
#include "check_one_device.hpp"

#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>

#include "same_bits.hpp"
#include "small_gpt.hpp"

using namespace strata;

namespace {

auto& W() { return mpi_test::world(); }
using namespace small_gpt;

template <class Sched, template <int, class...> class Strategy = Replicate, int N = 1, class... Extra>
using gpt4 = quartered<Strategy, N, MicroBatch<2>, NumMicroBatch<4>, Schedule<Sched>, Extra...>;
template <class Sched>
using gpt2 = staged<Replicate, 1, MicroBatch<2>, NumMicroBatch<3>, Schedule<Sched>>;
template <class Sched>
using mlp8 = Plan<Pipeline<Replicate<1, Linear<12, 32>, ReLU>, Replicate<1, Linear<32, 32>, GeLU>,
                           Replicate<1, Linear<32, 32>, ReLU>, Replicate<1, Linear<32, 32>, GeLU>,
                           Replicate<1, Linear<32, 32>, ReLU>, Replicate<1, Linear<32, 32>, GeLU>,
                           Replicate<1, Linear<32, 32>, ReLU>, Replicate<1, Linear<32, 5, false>>>,
                  Loss<SoftmaxCrossEntropy>, MicroBatch<3>, NumMicroBatch<8>, Schedule<Sched>>;

using ZBV = ZeroBubbleV;
using DPV = DualPipeV;
using I2 = Interleaved<2>;

// the V: stage s runs parts s and 2p − 1 − s
static_assert(gpt4<ZBV>::stages == 2 && gpt4<ZBV>::stage_of_part(3) == 0 && gpt4<ZBV>::stage_of_part(2) == 1);
static_assert(gpt4<ZBV>::part_of(1, 1) == 2 && gpt4<I2>::part_of(1, 1) == 3);
static_assert(mlp8<ZBV>::stages == 4 && mlp8<ZBV>::stage_of_part(4) == 3 && mlp8<ZBV>::stage_of_part(7) == 0);
static_assert(gpt4<ZBV>::valid && gpt4<ZBV>::deadlock_free && gpt4<ZBV>::split_backward);
// with F = B = W per part the step is 6M + p − 1 units (the last stage waits p − 1
// forwards, then never idles): bubble (p − 1) / (6M + p − 1)
static_assert(gpt4<ZBV>::bubble == sched::fraction(1, 6 * 4 + 1));
static_assert(mlp8<ZBV>::bubble == sched::fraction(3, 6 * 8 + 3));
static_assert(gpt2<ZBV>::bubble == sched::fraction(0, 1));
// at most 2p part-activations on a stage: 1F1B's p micro-batches of a whole stage
static_assert(mlp8<ZBV>::peak_in_flight(0) <= 8 && mlp8<ZBV>::peak_in_flight(3) <= 8);
// DualPipeV: the same placement and bound, one part-activation more at most
static_assert(gpt4<DPV>::valid && gpt4<DPV>::deadlock_free && gpt4<DPV>::split_backward);
static_assert(gpt4<DPV>::stage_of_part(3) == 0 && mlp8<DPV>::stage_of_part(7) == 0);
static_assert(gpt4<DPV>::bubble == sched::fraction(1, 6 * 4 + 1) && mlp8<DPV>::bubble == sched::fraction(3, 6 * 8 + 3));
static_assert(mlp8<DPV>::peak_in_flight(0) <= 9 && mlp8<DPV>::peak_in_flight(3) <= 9);

// float64 against one device, five steps
template <class P>
void equals_one_device(const char* name, optimizer opt) {
  mpi_test::check_one_device<P, double>("zero-bubble-v", name, opt, 1e-9, 5);
}

}  // namespace

TEST_CASE("ZB-V equals one device") {
  const Adam adam{.lr = 1e-2};
  equals_one_device<gpt2<ZBV>>("GPT two parts on one stage (the turn) ZB-V", adam);
  equals_one_device<gpt4<ZBV>>("GPT PP2 ZB-V, 4 parts (x DP2 on 4 ranks)", adam);
  if (W().size() == 4) {
    equals_one_device<gpt4<ZBV, Split, 2>>("GPT PP2 x TP2 ZB-V", adam);
    equals_one_device<gpt4<ZBV, Replicate, 1, Zero<1>>>("GPT PP2 x DP2 ZeRO-1 ZB-V", adam);
    equals_one_device<mlp8<ZBV>>("MLP PP4 ZB-V, 8 parts", SGD{.lr = 0.1, .momentum = 0.9});
  }
}

TEST_CASE("DualPipeV equals one device") {
  const Adam adam{.lr = 1e-2};
  equals_one_device<gpt2<DPV>>("GPT two parts on one stage (the turn) DualPipeV", adam);
  equals_one_device<gpt4<DPV>>("GPT PP2 DualPipeV, 4 parts (x DP2 on 4 ranks)", adam);
  if (W().size() == 4) {
    equals_one_device<gpt4<DPV, Split, 2>>("GPT PP2 x TP2 DualPipeV", adam);
    equals_one_device<mlp8<DPV>>("MLP PP4 DualPipeV, 8 parts", SGD{.lr = 0.1, .momentum = 0.9});
  }
  // each part's weight gradients sum the micro-batches in order: ZB-V's bits
  mpi_test::same_bits<gpt4<ZBV>, gpt4<DPV>, float>("zero-bubble-v", "GPT PP2 DualPipeV = ZB-V, float", AdamW{.lr = 1e-2});
}

TEST_CASE("ZB-V trains the same bits as interleaved 1F1B") {
  const AdamW adamw{.lr = 1e-2};
  mpi_test::same_bits<gpt4<I2>, gpt4<ZBV>, double>("zero-bubble-v", "GPT PP2, 4 parts", adamw);
  mpi_test::same_bits<gpt4<I2>, gpt4<ZBV>, float>("zero-bubble-v", "GPT PP2, 4 parts, float", adamw);
  mpi_test::same_bits<gpt4<I2>, gpt4<ZBV>, bf16>("zero-bubble-v", "GPT PP2, 4 parts, bf16", adamw);
  if (W().size() == 4) {
    mpi_test::same_bits<gpt4<I2, Split, 2>, gpt4<ZBV, Split, 2>, double>("zero-bubble-v", "GPT PP2 x TP2", adamw);
    mpi_test::same_bits<mlp8<I2>, mlp8<ZBV>, double>("zero-bubble-v", "MLP PP4, 8 parts", SGD{.lr = 0.1, .momentum = 0.9});
  }
}
