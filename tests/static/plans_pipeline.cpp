// Pipeline plans (EPL 5.2, OneFlow's two-stage MLP): placement, schedule choice,
// per-stage memory, pipeline transfers.
#include <strata/strata.hpp>

using namespace strata;

using Stage0 = Replicate<1, Flatten, Linear<784, 512>, ReLU>;
using Stage1 = Replicate<1, Linear<512, 512>, ReLU, Linear<512, 10>>;
using PP = Plan<Pipeline<Stage0, Stage1>, Loss<SoftmaxCrossEntropy>, MicroBatch<64>, NumMicroBatch<4>,
                Schedule<PreferBackward>>;
static_assert(PP::valid && PP::deadlock_free);
static_assert(PP::stages == 2 && PP::devices_per_replica == 2 && PP::data_parallel(4) == 2);
// rank = data · 2 + stage
static_assert(PP::coord(3).data == 1 && PP::coord(3).stage == 1 && PP::rank_of(1, 0, 0) == 2);
static_assert(PP::same_group(group_axis::data, 0, 2, 4) && !PP::same_group(group_axis::data, 0, 1, 4));
static_assert(PP::same_group(group_axis::pipeline, 2, 3, 4) && !PP::same_group(group_axis::pipeline, 1, 2, 4));
static_assert(PP::bubble == sched::fraction{1, 5});  // (p−1)/(m+p−1) = 1/5
static_assert(PP::peak_in_flight(0) == 2 && PP::peak_in_flight(1) == 1);
// stage 0 stashes Flatten (0) + Linear input 784 + ReLU input 512 per sample
static_assert(PP::stash_bytes(0) == (784 + 512) * 64 * 4);
static_assert(PP::peak_activation_bytes(0) == 2 * (784 + 512) * 64 * 4);
// stage 1: Linear 512 + ReLU 512 + Linear 512 + loss 10 per sample, one micro-batch in flight
static_assert(PP::peak_activation_bytes(1) == (512 + 512 + 512 + 10) * 64 * 4);
static_assert(PP::parameter_bytes(0) == (784LL * 512 + 512) * 4);
static_assert(PP::parameter_bytes(1) == (512LL * 512 + 512 + 512 * 10 + 10) * 4);
// stage 0 sends 64×512 activations forward per micro-batch; stage 1 sends the gradient back
static_assert(PP::communication(0).rows[0].kind == collective::send_recv);
static_assert(PP::communication(0).rows[0].bytes == 64LL * 512 * 4 * 4);
static_assert(PP::communication(1).rows[0].kind == collective::send_recv);
static_assert(PP::communication(1).rows[0].when == pass::backward);

// GPipe keeps every micro-batch in flight.
using GP = Plan<Pipeline<Stage0, Stage1>, Loss<SoftmaxCrossEntropy>, MicroBatch<64>, NumMicroBatch<4>,
                Schedule<PreferForward>>;
static_assert(GP::deadlock_free && GP::peak_in_flight(0) == 4 && GP::peak_in_flight(1) == 4);
static_assert(GP::bubble == sched::fraction{1, 5});
static_assert(GP::peak_activation_bytes(0) == 4 * (784 + 512) * 64 * 4);

// EPL's default placement: consecutive TaskGraphs in a Model go to different devices.
using IMPLICIT = Plan<Model<Stage0, Stage1>, Loss<SoftmaxCrossEntropy>, MicroBatch<64>, NumMicroBatch<4>>;
static_assert(IMPLICIT::stages == 2 && IMPLICIT::num_parts == 2);

// Four stages, 1F1B, m = 8.
using L = Linear<256, 256>;
using PP4 = Plan<Pipeline<Replicate<1, L, ReLU>, Replicate<1, L, ReLU>, Replicate<1, L, ReLU>, Replicate<1, L>>,
                 Loss<SoftmaxCrossEntropy>, MicroBatch<16>, NumMicroBatch<8>>;
static_assert(PP4::stages == 4 && PP4::bubble == sched::fraction{3, 11});
static_assert(PP4::peak_in_flight(0) == 4 && PP4::peak_in_flight(3) == 1);

// Interleaved: 4 parts, 2 chunks per stage → 2 stages; part k on stage k mod 2.
using IL = Plan<Pipeline<Replicate<1, L, ReLU>, Replicate<1, L, ReLU>, Replicate<1, L, ReLU>, Replicate<1, L>>,
                Loss<SoftmaxCrossEntropy>, MicroBatch<16>, NumMicroBatch<4>, Schedule<Interleaved<2>>>;
static_assert(IL::valid && IL::deadlock_free && IL::stages == 2 && IL::chunks == 2 && IL::devices_per_replica == 2);
static_assert(IL::stage_of_part(2) == 0 && IL::chunk_of_part(2) == 1 && IL::stage_of_part(3) == 1);
static_assert(IL::bubble == sched::fraction{1, 2 * 4 + 1});  // (p−1)/(v·m+p−1)
// stage 0 holds parts 0 and 2
static_assert(IL::parameter_bytes(0) == 2 * (256LL * 256 + 256) * 4);

int main() { return 0; }
