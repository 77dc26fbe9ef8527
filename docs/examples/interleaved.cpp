// Interleaved 1F1B (Colossal-AI InterleavedPipelineSchedule, num_model_chunks = 2):
// eight pipeline parts on four stages; part k runs on stage k % 4 as chunk k / 4.
#include <strata/strata.hpp>

using namespace strata;

using Block = Replicate<1, Linear<512, 512>, ReLU>;
using Net = Pipeline<Replicate<1, Flatten, Linear<784, 512>, ReLU>, Block, Block, Block, Block, Block, Block,
                     Replicate<1, Linear<512, 10>>>;
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, Input<1, 28, 28>, MicroBatch<16>, NumMicroBatch<8>,
               Schedule<Interleaved<2>>>;

static_assert(P::num_parts == 8 && P::chunks == 2 && P::stages == 4);
static_assert(P::devices_per_replica == 4);
static_assert(P::stage_of_part(5) == 1 && P::chunk_of_part(5) == 1);
static_assert(P::part_of(/*stage*/ 1, /*chunk*/ 1) == 5);
static_assert(P::deadlock_free);

// Bubble (p - 1) / (v*m + p - 1) = 3 / 19, against 3 / 11 without interleaving.
static_assert(P::bubble == sched::fraction{3, 19});

// The price: more chunk activations in flight, 2(p - s - 1) + (v - 1)p + 1 on stage s.
static_assert(P::peak_in_flight(0) == 2 * 3 + 1 * 4 + 1);
static_assert(P::peak_in_flight(3) == 0 + 1 * 4 + 1);

int main() { return 0; }
