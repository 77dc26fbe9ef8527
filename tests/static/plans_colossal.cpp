// Colossal-AI tensor modes: 2D on q² devices, 2.5D on q²·d, 3D on q³, with their meshes.
#include <array>

#include <strata/strata.hpp>

using namespace strata;

using Body = Split<4, Linear<256, 512>, GeLU, Linear<512, 256>>;
using T2 = Plan<Body, Tensor2D, Loss<SoftmaxCrossEntropy>, MicroBatch<8>>;
static_assert(T2::valid && T2::mesh.rows == 2 && T2::mesh.features == 2);
static_assert(T2::layer_plans[0].sig == signature::summa_2d && T2::layer_plans[0].in_layout == sbp::block);
static_assert(T2::layer_plans[0].local_params[0] == shape_v<128, 256>);  // [256/2, 512/2]
static_assert(T2::coord(3).row == 1 && T2::coord(3).col == 1 && T2::coord(2).row == 1 && T2::coord(2).col == 0);
constexpr bool mesh_groups_2d() {
  std::array<int, 4> g{};
  if (T2::group(group_axis::mesh_row, 2, 4, g) != 2 || g[0] != 2 || g[1] != 3) return false;
  return T2::group(group_axis::mesh_col, 2, 4, g) == 2 && g[0] == 0 && g[1] == 2;
}
static_assert(mesh_groups_2d());
// SUMMA: q = 2 broadcast steps of an 8/2 × 256/2 input block along the row
static_assert(T2::layer_plans[0].comms[0].kind == collective::broadcast &&
              T2::layer_plans[0].comms[0].group == group_axis::mesh_row && T2::layer_plans[0].comms[0].calls == 2 &&
              T2::layer_plans[0].comms[0].elems == 4 * 128);

using T25 = Plan<Split<8, Linear<256, 512>, GeLU, Linear<512, 256>>, Tensor2p5D<2>, Loss<SoftmaxCrossEntropy>,
                 MicroBatch<8>>;
static_assert(T25::valid && T25::mesh.features == 2 && T25::mesh.rows == 4);
static_assert(T25::layer_plans[0].sig == signature::tesseract_2p5d);
static_assert(T25::layer_plans[0].grad_group[0] == group_axis::depth_data);  // weights repeat over the depth layers
static_assert(T25::coord(5).depth == 1 && T25::coord(5).row == 0 && T25::coord(5).col == 1);

using T3 = Plan<Split<8, Linear<256, 512>, GeLU, Linear<512, 256>>, Tensor3D, Loss<SoftmaxCrossEntropy>, MicroBatch<8>>;
static_assert(T3::valid && T3::mesh.features == 2 && T3::mesh.rows == 4);
static_assert(T3::layer_plans[0].sig == signature::cube_3d);
static_assert(T3::layer_plans[0].local_params[0] == shape_v<64, 256>);  // [256/q², 512/q]: an eighth of W
static_assert(T3::parameter_bytes(0) < T25::parameter_bytes(0));

// 1D of the same body for comparison: the same parameter bytes as 2D, all activations whole.
using T1 = Plan<Body, Loss<SoftmaxCrossEntropy>, MicroBatch<8>>;
static_assert(T1::parameter_bytes(0) > T2::parameter_bytes(0) - 4096 && T1::peak_activation_bytes(0) > T2::peak_activation_bytes(0));

int main() { return 0; }
