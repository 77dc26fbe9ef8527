// Colossal-AI tensor modes: 2D on q² devices, 2.5D on q²·d, 3D on q³, with their meshes.
#include <array>

#include <strata/plan/cost.hpp>
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

// SUMMA's backward: dW by q input broadcasts along the row and one reduce-scatter of the q
// partial blocks along the column (master precision); dX, where it is wanted, by q weight
// broadcasts along the column and a reduce-scatter along the row. Layer 0 wants no dX.
constexpr bool summa_backward_lists() {
  const auto& l0 = T2::layer_plans[0];
  const auto& l2 = T2::layer_plans[2];
  if (l0.num_comms != 4 || l2.num_comms != 6) return false;
  const comm_desc& rs = l0.comms[3];
  if (rs.kind != collective::reduce_scatter || rs.group != group_axis::mesh_col || !rs.stats ||
      rs.elems != 256LL * 512 / 2)  // q weight blocks of 128 x 256: the column's [256 x 256] partial dW
    return false;
  const comm_desc& dx = l2.comms[5];
  return dx.kind == collective::reduce_scatter && dx.group == group_axis::mesh_row && dx.elems == 4 * 512;
}
static_assert(summa_backward_lists());
// Weights are distinct blocks (2D: reduced over replicas only); biases repeat down a mesh
// column; 2D blocks are numbered row-major over the [q x q] grid.
static_assert(T2::layer_plans[0].grad_group[0] == group_axis::data && T2::layer_plans[0].grad_group[1] == group_axis::col_data);
static_assert(T2::param_block(0, 0, 3) == 3 && T2::param_block(0, 0, 2) == 2 && T2::param_block(0, 1, 2) == 0);
static_assert(T2::param_holder(0, 1, 2) == 0 && T2::param_holder(0, 1, 3) == 1 && T2::param_holder(0, 0, 3) == 3);
static_assert(T2::reduction_devices(group_axis::col_data) == 2 && T2::reduction_devices(group_axis::part_data) == 4);
// 2.5D: weights repeat on the depth layers (device 5 holds device 1's block)
static_assert(T25::param_holder(0, 0, 5) == 1 && T25::reduction_devices(group_axis::depth_data) == 2);

// 3D: every Linear turns the layout. Layer 0 reads features along the mesh columns: it
// gathers X along the depth, W along the column group and reduce-scatters Y along the
// row; layer 2 reads them along the depth and exchanges the two axes.
static_assert(!T3::layer_plans[0].turned && T3::layer_plans[1].turned && T3::layer_plans[2].turned &&
              !T3::layer_plans[3].turned);
static_assert(T3::layer_plans[0].comms[0].group == group_axis::mesh_depth &&
              T3::layer_plans[0].comms[1].group == group_axis::mesh_col &&
              T3::layer_plans[0].comms[2].group == group_axis::mesh_row);
static_assert(T3::layer_plans[2].comms[0].group == group_axis::mesh_row &&
              T3::layer_plans[2].comms[2].group == group_axis::mesh_depth);
// the loss's row statistics go along the axis its features lie on
static_assert(T3::layer_plans[3].comms[0].group == group_axis::mesh_row);
// layer 0's output features lie along the depth: its bias repeats over a depth plane
static_assert(T3::layer_plans[0].grad_group[1] == group_axis::plane_data &&
              T3::layer_plans[2].grad_group[1] == group_axis::col_data);
// device 6 = (depth 1, row 1, col 0): S(0,-1) block (rows 1·2 + 1, features 0) unturned,
// (rows 1·2 + 0, features 1) turned. Device 5 = (depth 1, row 0, col 1) holds W0's block
// (In block 1·2 + 0, Out block 1) = 5 of the [4 x 2] grid, and b0's block 1.
static_assert(T3::input_block(0, 6).row == 3 && T3::input_block(0, 6).feature == 0);
static_assert(T3::input_block(1, 6).row == 2 && T3::input_block(1, 6).feature == 1);
static_assert(T3::param_block(0, 0, 5) == 5 && T3::param_block(0, 1, 5) == 1);

// ---- a user layer that says how it shards on a mesh and what it costs -----------------------
// A bias-free projection of role opaque: its role alone keeps it whole and refuses the mesh
// modes (rule [tensor-mode-layer]) and leaves it to the roofline; its own mesh_shard makes it
// the mode's Linear, and its own gemms let the cost model time it GEMM by GEMM. Declared =
// false: the same layer without the two members.
template <int In, int Out, bool Declared = true>
struct Project {
  static constexpr std::string_view name = "Project";
  static constexpr layer_role role = layer_role::opaque;
  static constexpr shape_t in_shape = shape_v<In>;
  static constexpr shape_t out_shape(shape_t in) { return in.with_last(Out); }
  static constexpr std::array<param_t, 1> params{{{"weight", shape_v<In, Out>, param_role::weight, 1}}};
  static constexpr long long forward_flops(shape_t in) { return in.numel() / In * 2LL * In * Out; }
  static constexpr long long backward_flops(shape_t in) { return 2 * forward_flops(in); }
  static constexpr buffer_needs memory(const local_dims&) { return {.keep_input = true}; }
  static constexpr mesh_choice mesh_shard(const mesh_query& q)
    requires Declared
  {
    return sharding::mesh_linear(q, In, Out);
  }
  static constexpr call_gemms gemms(const local_dims& d)
    requires Declared
  {
    call_gemms g;
    g.add({1, static_cast<double>(d.rows), static_cast<double>(d.out_cols), static_cast<double>(d.in_cols), true});
    return g;
  }
};
static_assert(!describe<Project<512, 256, false>>()
                   .mesh_shard(mesh_query{signature::summa_2d, 2, shape_v<512>, shape_v<256>})
                   .supported);

// Under 2D it is SUMMA with the collectives, shards and gradient groups of the built-in Linear.
template <int N, class Mode, class... L>
using Mesh = Plan<Split<N, L...>, Mode, Loss<SoftmaxCrossEntropy>, MicroBatch<8>>;
using UP2 = Mesh<4, Tensor2D, Linear<256, 512>, GeLU, Project<512, 256>>;
using LP2 = Mesh<4, Tensor2D, Linear<256, 512>, GeLU, Linear<512, 256, false>>;
template <class A, class B>
constexpr bool planned_alike(int i) {
  const auto& a = A::layer_plans[static_cast<std::size_t>(i)];
  const auto& b = B::layer_plans[static_cast<std::size_t>(i)];
  if (a.sig != b.sig || a.num_comms != b.num_comms || a.turned != b.turned || a.local_params[0] != b.local_params[0] ||
      a.grad_group[0] != b.grad_group[0])
    return false;
  for (int k = 0; k < a.num_comms; ++k) {
    const comm_desc &x = a.comms[static_cast<std::size_t>(k)], &y = b.comms[static_cast<std::size_t>(k)];
    if (x.kind != y.kind || x.group != y.group || x.when != y.when || x.elems != y.elems || x.calls != y.calls)
      return false;
  }
  for (int d = 0; d < A::part_devices; ++d)
    if (A::param_block(i, 0, d) != B::param_block(i, 0, d)) return false;
  return true;
}
static_assert(UP2::valid && UP2::layer_plans[2].sig == signature::summa_2d);
static_assert(UP2::layer_plans[2].local_params[0] == shape_v<256, 128> && UP2::layer_plans[2].num_comms == 6);
static_assert(planned_alike<UP2, LP2>(2));
// Under 3D its projection turns the layout as a Linear's does: the GeLU after it reads features
// along the depth, the loss after the next Linear along the columns again.
using UP3 = Mesh<8, Tensor3D, Project<256, 512>, GeLU, Linear<512, 256>>;
using LP3 = Mesh<8, Tensor3D, Linear<256, 512, false>, GeLU, Linear<512, 256>>;
static_assert(UP3::valid && UP3::layer_plans[1].turned && !UP3::layer_plans[3].turned);
static_assert(planned_alike<UP3, LP3>(0) && planned_alike<UP3, LP3>(2));

// The cost model times its GEMMs as the Linear's; without them it takes the roofline.
constexpr hardware A100 = hw::A100_80GB::value;
template <class L>
using Probe = Plan<Replicate<1, L>, Input<512, 1024>, Loss<SoftmaxCrossEntropy>, MicroBatch<1>, Element<bf16>>;
template <class L>
constexpr cost::unit_time unit_of = cost::profile_of<Probe<L>, 1>(std::array<int, 2>{0, 1}, A100).units[0];
static_assert(unit_of<Project<1024, 1024>>.forward_s == unit_of<Linear<1024, 1024, false>>.forward_s &&
              unit_of<Project<1024, 1024>>.backward_s == unit_of<Linear<1024, 1024, false>>.backward_s);
static_assert(unit_of<Project<1024, 1024, false>>.forward_s != unit_of<Project<1024, 1024>>.forward_s);

int main() { return 0; }
