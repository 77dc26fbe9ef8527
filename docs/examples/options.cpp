// Every Plan option, its default, and the spelling that overrides it. Options may
// come in any order; each category at most once.
#include <type_traits>

#include <strata/strata.hpp>

using namespace strata;

using Net = Replicate<1, Linear<16, 8>, ReLU, Linear<8, 4>>;

// Defaults.
using D = Plan<Net, Loss<SoftmaxCrossEntropy>>;
static_assert(D::micro_batch == 1 && D::num_micro_batch == 1);
static_assert(std::is_same_v<D::schedule_t, PreferBackward>);  // 1F1B, as in EPL
static_assert(D::chunks == 1);
static_assert(D::fixed_world == 0);                        // world read at run time
static_assert(D::input_shape == shape_v<16>);              // from Linear<16, 8>
static_assert(D::mode == tensor_mode::d1);
static_assert(std::is_same_v<D::default_strategy, Replicate<1>>);
static_assert(D::gradient_reduce == reduce_method::mean);
static_assert(D::buckets == 5);                            // EPL communication.max_splits
static_assert(D::element_bytes == 4 && std::is_same_v<D::element_type, float>);

// Everything given.
using All = Plan<Linear<16, 4>,  // a bare layer: takes the Default strategy
                 Element<double>, Buckets<2>, GradientReduce<ReduceSum>, Default<Replicate<2>>, Tensor1D,
                 Input<16>, World<8>, Loss<SoftmaxCrossEntropy>, Schedule<PreferForward>, NumMicroBatch<4>,
                 MicroBatch<32>>;
static_assert(All::micro_batch == 32 && All::num_micro_batch == 4);
static_assert(std::is_same_v<All::schedule_t, PreferForward>);
static_assert(All::devices_per_replica == 2 && All::data_parallel() == 4);
static_assert(All::global_batch(8) == 4 * 32 * 4);
static_assert(All::gradient_reduce == reduce_method::sum && All::buckets == 2 && All::element_bytes == 8);
static_assert(All::taskgraphs[0].is_default && All::taskgraphs[0].devices == 2);

// The loss may be the model's last layer instead of an option.
using LossLayer = Plan<Replicate<1, Linear<16, 4>, SoftmaxCrossEntropy>>;
static_assert(LossLayer::num_layers == 2 && LossLayer::valid);

int main() { return 0; }
