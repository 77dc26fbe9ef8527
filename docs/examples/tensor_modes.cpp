// Colossal-AI's tensor modes: the same Split<N> MLP as 2D (N = q*q), 2.5D
// (N = q*q*depth) and 3D (N = q*q*q) tensor parallelism.
#include <strata/strata.hpp>

using namespace strata;

template <int N>
using Mlp = Split<N, Linear<1024, 4096>, GeLU, Linear<4096, 1024>>;
template <int N, class Mode>
using P = Plan<Mlp<N>, Loss<SoftmaxCrossEntropy>, MicroBatch<8>, Mode>;

// 2D (SUMMA), q = 2 on 4 devices: rows and features each cut in two.
using P2 = P<4, Tensor2D>;
static_assert(P2::mesh.rows == 2 && P2::mesh.features == 2);
static_assert(P2::layer_plans[0].sig == signature::summa_2d);
static_assert(P2::layer_plans[0].in_layout == sbp::block);
static_assert(P2::layer_plans[0].local_params[0] == shape_v<512, 2048>);  // W cut q x q
static_assert(P2::coord(3).row == 1 && P2::coord(3).col == 1);

// 2.5D, q = 2 and depth 2 on 8 devices: weights cut q x q and repeated on each depth layer.
using P25 = P<8, Tensor2p5D<2>>;
static_assert(P25::mesh.rows == 4 && P25::mesh.features == 2);
static_assert(P25::layer_plans[0].sig == signature::tesseract_2p5d);
static_assert(P25::layer_plans[0].local_params[0] == shape_v<512, 2048>);
static_assert(P25::layer_plans[0].grad_group[0] == group_axis::depth_data);
static_assert(P25::coord(5).depth == 1 && P25::coord(5).row == 0 && P25::coord(5).col == 1);

// 3D, q = 2 on 8 devices: each device holds 1/8 of every weight.
using P3 = P<8, Tensor3D>;
static_assert(P3::mesh.rows == 4 && P3::mesh.features == 2);
static_assert(P3::layer_plans[0].sig == signature::cube_3d);
static_assert(P3::layer_plans[0].local_params[0] == shape_v<256, 2048>);
static_assert(P3::layer_plans[0].local_params[0].numel() * 8 == 1024LL * 4096);

// 1D (the default) is Megatron's column/row pairing.
static_assert(P<4, Tensor1D>::layer_plans[0].sig == signature::column_parallel);

// The micro-batch is cut over the mesh rows, so 8 must divide by 2 (2D) and 4 (2.5D, 3D).
static_assert(P3::layer_plans[0].rows_div == 4 && P3::layer_plans[0].features_div == 2);

int main() { return 0; }
