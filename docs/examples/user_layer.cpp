// A user-defined layer: a learned per-feature scale. It satisfies strata::Layer,
// so the planner can place it, shard around it and cost it.
#include <array>
#include <string_view>

#include <strata/strata.hpp>

using namespace strata;

template <int D>
struct Scale {
  static constexpr std::string_view name = "Scale";
  // opaque: the planner knows nothing about how to cut it, so it gets whole
  // features (its input is gathered if it arrives feature-split) and whole parameters.
  static constexpr layer_role role = layer_role::opaque;
  static constexpr shape_t in_shape = shape_v<D>;  // last dimension is checked
  static constexpr shape_t out_shape(shape_t in) { return in; }
  static constexpr std::array<param_t, 1> params{{{"scale", shape_v<D>, param_role::replicated, -1}}};
  static constexpr long long forward_flops(shape_t in) { return in.numel(); }
  static constexpr long long backward_flops(shape_t in) { return 2 * in.numel(); }  // dx and dscale
  static constexpr long long stash_elems(shape_t in) { return in.numel(); }         // keeps x
};

static_assert(Layer<Scale<512>>);
static_assert(!Layer<int>);
static_assert(Layer<Linear<4, 4>> && Layer<SoftmaxCrossEntropy>);

using P = Plan<Split<4, Linear<256, 512>, Scale<512>, Linear<512, 16>>, Loss<SoftmaxCrossEntropy>, MicroBatch<8>>;

// The column-parallel output is gathered before the opaque layer...
static_assert(P::layer_plans[1].arrives == sbp::split_feature && P::layer_plans[1].in_layout == sbp::broadcast);
static_assert(P::layer_plans[1].comms[0].kind == collective::all_gather);
static_assert(P::layer_plans[1].local_params[0] == shape_v<512>);
// ...so the next Linear starts a new column-parallel pair.
static_assert(P::layer_plans[2].sig == signature::column_parallel);
// Shapes are checked against the user layer too: Scale<512> after Linear<256, 512> fits.
static_assert(P::layer_plans[1].in == shape_v<512> && P::layer_plans[1].out == shape_v<512>);
// Costs come from the layer's own functions.
static_assert(P::flops_per_replica_step() > 0);

int main() { return 0; }
