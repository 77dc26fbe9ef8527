// Rule checkpoint-model: a checkpoint of one model cannot load into another; here the
// plan that wrote it has 64 hidden units, the reader 32: layer 0 differs.
// expected-error: strata rule \[checkpoint-model\]
// expected-error: checkpoint_same_model<(0>|Layer> \[with Layer=0\])
#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

using namespace strata;

using Wrote = Plan<Replicate<1, Linear<16, 64>, ReLU, Linear<64, 4>>, Loss<SoftmaxCrossEntropy>, Element<double>>;
using Reads = Plan<Split<2, Linear<16, 32>, ReLU, Linear<32, 4>>, Loss<SoftmaxCrossEntropy>, Element<double>>;

int main() {
  auto w = local_world<Host>();
  auto t = make_trainer<Reads>(w, SGD{});
  t.load_checkpoint_from<Wrote>("/nonexistent");
}
