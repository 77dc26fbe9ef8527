// Offload<...>, ApplyGroups<N> and CastWeightsPerUse change where weights and optimizer
// state live and when they move, never a value: training with them gives the same bits
// as without (float64, float and bf16; data, tensor and pipeline parallel, ZeRO-1), on
// 1, 2 and 4 ranks. The host backend's host memory is an allocation of its own, reached
// only through upload/download, so this runs the GPU's code path.
// mpi-ranks: 1 2 4
#include "doctest_world.hpp"

#include <cstdio>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>

#include "same_bits.hpp"
#include "small_gpt.hpp"

using namespace strata;

namespace {


using namespace small_gpt;
using MLPb = small_gpt::MLP;
template <class... Extra>
using dp = on<Replicate, 1, 1, MicroBatch<2>, Extra...>;
// three TaskGraphs on each device: the two staging slots take turns
template <class... Extra>
using colocated = Plan<Colocate<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>>, Replicate<1, Attn>,
                                Replicate<1, MLPb, LayerNorm<D>, Linear<D, V>>>,
                       Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<2>, Extra...>;
template <class... Extra>
using tp = on<Split, 2, 1, MicroBatch<2>, SequenceParallel, Extra...>;
template <class... Extra>
using pp = Plan<Pipeline<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>, Attn>, Replicate<1, MLPb, LayerNorm<D>, Linear<D, V>>>,
                Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<2>, NumMicroBatch<2>, Extra...>;

template <class Plain, class Moved, class T = double>
void same(const char* name, optimizer o = AdamW{.lr = 1e-2}) {
  mpi_test::same_bits<Plain, Moved, T>("offload", name, o);
}

using weights = Offload<offload_level::weights>;
using everything = Offload<offload_level::weights_and_state>;

}  // namespace

TEST_CASE("offloaded weights and state train the same bits") {
  same<dp<>, dp<weights>>("DP, weights offloaded");
  same<colocated<>, colocated<weights>>("3 TaskGraphs per device, weights offloaded");
  same<colocated<>, colocated<everything, ApplyGroups<2>>, bf16>("3 TaskGraphs bf16, weights + state, 2 groups");
  same<dp<>, dp<everything, ApplyGroups<3>>>("DP, weights + Adam state offloaded, 3 apply groups");
  same<dp<>, dp<everything, ApplyGroups<7>>, float>("DP float, weights + state, 7 groups", SGD{.lr = 0.1, .momentum = 0.9});
  same<dp<>, dp<everything>, bf16>("DP bf16 (FP32 masters offloaded)");
  same<tp<>, tp<everything, ApplyGroups<2>>>("TP2 + SP, weights + state, 2 groups");
  same<pp<>, pp<weights>>("PP2 1F1B, weights");
  same<dp<Zero<1>>, dp<Zero<1>, everything, ApplyGroups<4>>>("DP ZeRO-1, weights + state, 4 groups");
}

TEST_CASE("ApplyGroups alone and weights cast per use train the same bits") {
  same<dp<>, dp<ApplyGroups<5>>>("DP, 5 apply groups");
  same<dp<>, dp<CastWeightsPerUse>, bf16>("DP bf16, weights cast per use");
  same<colocated<>, colocated<CastWeightsPerUse>, bf16>("3 TaskGraphs bf16, weights cast per use");
  same<tp<>, tp<CastWeightsPerUse>, bf16>("TP2 + SP bf16, weights cast per use");
  same<pp<>, pp<CastWeightsPerUse>, bf16>("PP2 bf16, weights cast per use");
}
