// Rule rope-head-dim: rotary positions rotate pairs of a head's features, and
// CausalSelfAttention<15, 3, 8, 10000> has heads of 5 features.
// expected-error: strata rule \[rope-head-dim\]
// expected-error: rope_head_dim_even<(5, 10000>|HeadDim, Base> \[with HeadDim=5, Base=10000\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, CausalSelfAttention<15, 3, 8, 10000>, Linear<15, 10>>, Input<8, 15>,
               Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
