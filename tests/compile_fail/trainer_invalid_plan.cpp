// A broken rule under a trainer is reported once: Split<3> of 4 heads raises
// [split-heads] and nothing else (no follow-on error from the trainer or the executor).
// expected-error: strata rule \[split-heads\]
#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Split<3, CausalSelfAttention<12, 4, 8>, Linear<12, 12>>, Input<8, 12>, Loss<SoftmaxCrossEntropy>>;

int main(int argc, char** argv) {
  auto world = init<Host>(argc, argv);
  auto t = make_trainer<P>(world, SGD{});
  (void)t;
}
