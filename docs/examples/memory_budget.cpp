// A memory budget checked at compile time: a plan that does not fit is a compile
// error, with the stage and the numbers in the instantiation trace.
#include <strata/strata.hpp>

using namespace strata;

using Net = Pipeline<Replicate<1, Flatten, Linear<784, 4096>, ReLU, Linear<4096, 4096>, ReLU>,
                     Replicate<1, Linear<4096, 4096>, ReLU, Linear<4096, 10>>>;
template <class S, class E = float>
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, Input<1, 28, 28>, MicroBatch<64>, NumMicroBatch<8>, Schedule<S>,
               Element<E>>;
using OneFOneB = P<PreferBackward>;

constexpr long long MiB = 1LL << 20;

// The budget of every stage, as one line each.
template <class Plan, int Stage, long long Budget>
constexpr bool fits() {
  static_assert(Plan::peak_memory_bytes(Stage) <= Budget, "stage exceeds its memory budget");
  return true;
}
static_assert(fits<OneFOneB, 0, 512 * MiB>() && fits<OneFOneB, 1, 512 * MiB>());

// What the total is made of: parameters + gradients + Adam's two moments + every activation
// buffer the executor allocates (the lowered buffer plan: stash slots, messages, work region).
static_assert(OneFOneB::peak_memory_bytes(0) ==
              OneFOneB::parameter_bytes(0) + OneFOneB::gradient_bytes(0) + OneFOneB::adam_state_bytes(0) +
                  OneFOneB::activation_arena_bytes(0));
// The stash is most of it; the rest is one micro-batch's 64 × 4096 activation waiting to be
// sent to stage 1 (1 MiB), its gradient coming back (1 MiB) and the two transients a layer
// call uses in turn (2 MiB).
static_assert(OneFOneB::activation_arena_bytes(0) - OneFOneB::peak_activation_bytes(0) == 4 * MiB);
static_assert(OneFOneB::adam_state_bytes(0) == 2 * OneFOneB::parameter_bytes(0));
static_assert(OneFOneB::parameter_bytes(0) == (785LL * 4096 + 4097LL * 4096) * 4);

// Activations: one micro-batch's stash times the micro-batches held at the peak.
static_assert(OneFOneB::peak_activation_bytes(0) == OneFOneB::peak_in_flight(0) * OneFOneB::stash_bytes(0));
// GPipe holds all eight micro-batches instead of two.
static_assert(P<PreferForward>::peak_activation_bytes(0) == 4 * OneFOneB::peak_activation_bytes(0));
// Element<T> sets the bytes per element (float by default).
static_assert(P<PreferBackward, double>::peak_memory_bytes(0) == 2 * OneFOneB::peak_memory_bytes(0));

int main() { return 0; }
