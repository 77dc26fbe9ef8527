// Rule zero-bubble: ZeroBubbleH1 keeps each micro-batch's stash until its W pass, but a
// recomputed region would overwrite its activations in the stage's recompute buffers.
// expected-error: strata rule \[zero-bubble\]
// expected-error: zero_bubble_options<(2, 0, 0>|RecomputedRegions, ZeroLevel, StagedWeights> \[with RecomputedRegions ?= ?2, ZeroLevel ?= ?0, StagedWeights ?= ?0\])
#include <strata/strata.hpp>

using namespace strata;

using Net = Pipeline<Replicate<1, Linear<8, 16>, ReLU, Linear<16, 16>>, Replicate<1, ReLU, Linear<16, 4>>>;
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, NumMicroBatch<4>, Schedule<ZeroBubbleH1>,
               GradientCheckpoint<checkpoint_mode::end_taskgraph>>;
static_assert(P::valid);
