// Rule dual-pipe-v: DualPipeV puts 2p forwards on every stage before its first backward, and
// this 2-stage plan (4 parts in a V) has 3 micro-batches.
// expected-error: strata rule \[dual-pipe-v\]
// expected-error: dual_pipe_v_micro_batches<(3, 2>|NumMicroBatch, Stages> \[with NumMicroBatch=3, Stages=2\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Pipeline<Replicate<1, Linear<8, 8>>, Replicate<1, Linear<8, 8>>, Replicate<1, Linear<8, 8>>,
                        Replicate<1, Linear<8, 4>>>,
               Input<8>, Loss<SoftmaxCrossEntropy>, MicroBatch<1>, NumMicroBatch<3>, Schedule<DualPipeV>>;
static_assert(P::valid);
