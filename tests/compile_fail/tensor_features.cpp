// Rule tensor-features: Tensor2D on Split<4> is a 2 x 2 mesh whose rows split the
// features of a LayerNorm in two, but LayerNorm<9> (layer 0) has 9 features.
// expected-error: strata rule \[tensor-features\]
// expected-error: tensor_features_divisible<(0, 9, 2>|Index, Features, Q> \[with Index=0, Features=9, Q=2\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Split<4, LayerNorm<9>, Linear<9, 16>>, Loss<SoftmaxCrossEntropy>, Tensor2D, MicroBatch<4>>;
static_assert(P::valid);
