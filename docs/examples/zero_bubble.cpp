// Zero-bubble pipeline (ZB-H1, Qi et al. 2023): each backward splits into B (the input's
// gradient, which the previous stage waits for) and W (the weights' gradients, which
// nobody waits for); W's are deferred into the cool-down where 1F1B idles.
#include <strata/strata.hpp>

using namespace strata;

constexpr int V = 1024, S = 128, D = 256, H = 8;
using Block = Repeat<2, Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>,
                     Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>>;
using Net = Pipeline<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, Block>,  // stage 0
                     Replicate<1, Block>, Replicate<1, Block>,                      // stages 1, 2
                     Replicate<1, Block, LayerNorm<D>, Linear<D, V>>>;              // stage 3 (+ the loss)

template <class Sched>
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, Input<S>, MicroBatch<4>, NumMicroBatch<8>, Schedule<Sched>>;
using OneFOneB = P<PreferBackward>;
using ZB = P<ZeroBubbleH1>;

static_assert(ZB::split_backward && ZB::deadlock_free);

// Bubble, counting a forward, a B and a W as one unit each (1F1B's backward is B + W):
// 1F1B (p - 1)(F + B + W) / (m + p - 1)(F + B + W) = 3 / 11; ZB-H1 (p - 1)(F + B - W)
// over m(F + B + W) + (p - 1)(F + B - W) = 3 / 27.
static_assert(OneFOneB::bubble == sched::fraction{3, 11});
static_assert(ZB::bubble == sched::fraction{3, 27});

// The simulator's step for other costs, against the closed form: F = 2, B = 2, W = 1.
static_assert(sched::simulate(ZB::program, 2, 2, nullptr, 1).makespan == 8 * (2 + 2 + 1) + 3 * (2 + 2 - 1));
static_assert(sched::simulate(OneFOneB::program, 2, 2 + 1).makespan == (8 + 3) * (2 + 2 + 1));

// The price: a micro-batch's activations (and each Linear's output gradient) live until
// its W, so every stage holds up to p micro-batches, as 1F1B's first stage does.
static_assert(ZB::peak_activation_bytes(3) > OneFOneB::peak_activation_bytes(3));
static_assert(OneFOneB::peak_in_flight(3) == 1 && ZB::peak_in_flight(3) == 4);
static_assert(ZB::peak_in_flight(0) == OneFOneB::peak_in_flight(0));

// Stage s runs W of micro-batch k right after B of micro-batch k + s: the last s + 1 W's
// come after its last B and fill the cool-down.
constexpr int ws_after_last_b(int s) {
  int n = 0;
  for (int i = 0; i < ZB::program.length[s]; ++i) {
    if (ZB::program.at(s, i).kind == sched::op::backward) n = 0;
    if (ZB::program.at(s, i).kind == sched::op::weight) ++n;
  }
  return n;
}
static_assert(ws_after_last_b(0) == 1 && ws_after_last_b(3) == 4);

int main() { return 0; }
