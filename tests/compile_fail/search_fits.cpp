// Rule search-fits: no configuration of this GPT on 4 devices fits 0 MiB per device.
// expected-error: strata rule \[search-fits\]
// expected-error: search_fits<(false, 4, 0>|Found, Devices, BudgetMiB> \[with Found=false, Devices=4, BudgetMiB=0(LL)?\])
#include <strata/plan/search.hpp>
#include <strata/strata.hpp>

using namespace strata;

using GPT = Model<Embedding<64, 32>, PositionEmbedding<16, 32>, Repeat<2, Residual<LayerNorm<32>, Linear<32, 32>>>,
                  LayerNorm<32>, Linear<32, 64>>;
using S = Search<GPT, 4, 0, 16, hw::A100_80GB, TensorDegrees<1, 2>, Input<16>, Loss<SoftmaxCrossEntropy>>;
static_assert(S::found);
