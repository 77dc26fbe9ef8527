// MoE under Split<2> is expert parallel (tokens dispatched to the devices holding their
// experts by all-to-all): planned and costed, but the trainer does not execute it yet;
// MoE trains on one device and under Replicate<N>.
// expected-error: trainer: MoE under Split<N> \(expert parallelism
#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Split<2, MoE<4, 8, 16>, Linear<8, 6>>, Input<4, 8>, Loss<SoftmaxCrossEntropy>, MicroBatch<2>,
               Element<double>>;
static_assert(P::valid && P::layer_plans[0].sig == signature::expert_parallel);

int main() {
  auto w = local_world<Host>();
  auto t = make_trainer<P>(w, SGD{});
}
