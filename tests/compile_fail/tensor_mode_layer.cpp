// Rule tensor-mode-layer: 2.5D tensor parallelism (mode code 25) shards Linear,
// activations, LayerNorm and the loss only, but layer 2 is a MultiHeadAttention.
// expected-error: strata rule \[tensor-mode-layer\]
// expected-error: tensor_mode_supports_layer<(2, 25>|Index, Mode> \[with Index=2, Mode=25\])
#include <strata/strata.hpp>

using namespace strata;

using Net = Split<8, Linear<512, 512>, GeLU, MultiHeadAttention<512, 8, 16>, Linear<512, 16>>;
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, Input<16, 512>, Tensor2p5D<2>, MicroBatch<8>>;
static_assert(P::valid);
