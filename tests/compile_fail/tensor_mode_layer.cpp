// Rule tensor-mode-layer: 2D tensor parallelism (mode code 2) shards Linear, activations,
// LayerNorm, attention, residuals and the loss only, but layer 0 is a Flatten.
// expected-error: strata rule \[tensor-mode-layer\]
// expected-error: tensor_mode_supports_layer<(0, 2>|Index, Mode> \[with Index=0, Mode=2\])
#include <strata/strata.hpp>

using namespace strata;

using Net = Split<4, Flatten, Linear<512, 512>, GeLU, Linear<512, 16>>;
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, Input<16, 32>, Tensor2D, MicroBatch<8>>;
static_assert(P::valid);
