// Rule split-experts: Split<3> places the experts of layer 0, MoE<8, 512, 1024, 2>, on
// 3 devices, but 8 experts do not divide evenly among 3.
// expected-error: strata rule \[split-experts\]
// expected-error: split_experts_divisible<(0, 8, 3>|Index, Experts, N> \[with Index=0, Experts=8, N=3\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Split<3, MoE<8, 512, 1024, 2>, Linear<512, 12>>, Loss<SoftmaxCrossEntropy>, MicroBatch<6>>;
static_assert(P::valid);
