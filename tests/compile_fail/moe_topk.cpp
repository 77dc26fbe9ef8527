// Rule moe-topk: MoE<3, 1000, 64, 5> routes each token to its top 5 experts, but the
// layer has only 3 experts.
// expected-error: strata rule \[moe-topk\]
// expected-error: moe_topk_within_experts<(5, 3>|TopK, Experts> \[with TopK=5, Experts=3\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Replicate<1, MoE<3, 1000, 64, 5>, Linear<1000, 10>>, Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
