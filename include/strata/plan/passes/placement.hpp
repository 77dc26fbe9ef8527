#pragma once
// Pass 2, placement: where each part and each device of a replica sits — the rank
// layout, the tensor mesh, the communication groups along every axis.
#include <array>

#include "strata/plan/passes/structure.hpp"
#include "strata/plan/sharding.hpp"

namespace strata {

// Coordinates of a rank: which replica, which pipeline stage, which device of the stage.
struct rank_coord {
  int data = 0, stage = 0, index = 0;
  int row = 0, col = 0, depth = 0;  // position in a 2D/2.5D/3D tensor mesh
  // Context<N>: the context index (which pieces of every sample); the tensor index (which shard
  // of a Split, or of Context<N, Split<T>>'s Split<T>). index = cp·T + tp.
  int cp = 0, tp = 0;
};

namespace detail {

template <class S>
struct placement_pass : S {
  using S::stages, S::v_shape, S::part_devices, S::devices_per_replica, S::mode, S::tensor_depth, S::fixed_world,
      S::replica_batch, S::context, S::context_tensor;

  static constexpr int stage_of_part(int part) { return sched::placed_stage(stages, v_shape, part); }
  static constexpr int chunk_of_part(int part) { return part / stages; }
  static constexpr int part_of(int stage, int chunk) { return sched::placed_part(stages, v_shape, stage, chunk); }

  static constexpr int data_parallel(int world) { return world / devices_per_replica; }
  static constexpr int data_parallel() requires(fixed_world > 0) { return fixed_world / devices_per_replica; }
  static constexpr int global_batch(int world) { return data_parallel(world) * replica_batch; }
  // The data-parallel degree the analyses assume: World<N>'s, else 0 (unknown).
  static constexpr int default_dp = fixed_world > 0 ? fixed_world / devices_per_replica : 0;

  // The devices a layer's layouts are cut over: the part's, or Context<N, Split<T>>'s T.
  static constexpr int layout_devices = context_tensor > 1 ? context_tensor : part_devices;
  // Context<N, Split<T>>: the rows every layout holds are 1/N of each sample's (1 otherwise:
  // Context<N> alone cuts them by its S(0) layout).
  static constexpr int context_rows = context_tensor > 1 ? context : 1;
  // Tensor-mesh factors of the Split TaskGraphs (1D: features split n ways).
  static constexpr mesh_factors mesh = mesh_of(mode, layout_devices, tensor_depth);
  static constexpr int mesh_side = mode == tensor_mode::d1 ? layout_devices : mesh.features;
  // The tensor index and the context index of device `index` of a part.
  static constexpr int tensor_index(int index) { return context > 1 ? index % context_tensor : index; }
  static constexpr int context_index(int index) { return context > 1 ? index / context_tensor : 0; }
  // Device `index`'s place among the layout_devices its layouts are cut over.
  static constexpr int layout_index(int index) { return context_tensor > 1 ? index % context_tensor : index; }
  // Context<N, Split<T>>: the block of every layout's rows device `index` holds (its context
  // index); 0 otherwise.
  static constexpr int context_block(int index) { return context_rows > 1 ? context_index(index) : 0; }
  // The group a layer's own collectives and its layout conversions run over.
  static constexpr group_axis layout_axis = context_tensor > 1 ? group_axis::tensor : group_axis::part;
  // The reduction group of sharded parameters (group 0): the replicas, and under
  // Context<N, Split<T>> the other context indices too.
  static constexpr group_axis shard_axis = context_tensor > 1 ? group_axis::context_data : group_axis::data;

  // Rank layout: rank = data · devices_per_replica + stage · part_devices + index.
  static constexpr rank_coord coord(int rank) {
    rank_coord c;
    c.data = rank / devices_per_replica;
    const int r = rank % devices_per_replica;
    c.stage = r / part_devices;
    c.index = r % part_devices;
    c.tp = tensor_index(c.index);
    c.cp = context_index(c.index);
    c.col = c.index % mesh_side;
    c.row = mode == tensor_mode::d1 ? 0 : (c.index / mesh_side) % mesh_side;
    c.depth = mode == tensor_mode::d1 ? 0 : c.index / (mesh_side * mesh_side);
    return c;
  }
  static constexpr int rank_of(int data, int stage, int index) {
    return data * devices_per_replica + stage * part_devices + index;
  }
  // Whether `other` is in `rank`'s group along `axis` (world of `world` ranks).
  static constexpr bool same_group(group_axis axis, int rank, int other, int world) {
    if (other < 0 || other >= world) return false;
    const rank_coord a = coord(rank), b = coord(other);
    switch (axis) {
      case group_axis::part: return a.data == b.data && a.stage == b.stage;
      case group_axis::data: return a.stage == b.stage && a.index == b.index;
      case group_axis::pipeline: return a.data == b.data && a.index == b.index;
      case group_axis::part_data: return a.stage == b.stage;
      case group_axis::mesh_row: return a.data == b.data && a.stage == b.stage && a.depth == b.depth && a.row == b.row;
      case group_axis::mesh_col: return a.data == b.data && a.stage == b.stage && a.depth == b.depth && a.col == b.col;
      case group_axis::mesh_depth: return a.data == b.data && a.stage == b.stage && a.row == b.row && a.col == b.col;
      case group_axis::depth_data: return a.stage == b.stage && a.row == b.row && a.col == b.col;
      case group_axis::col_data: return a.stage == b.stage && a.col == b.col;
      case group_axis::plane_data: return a.stage == b.stage && a.depth == b.depth;
      case group_axis::tensor: return a.data == b.data && a.stage == b.stage && a.cp == b.cp;
      case group_axis::context: return a.data == b.data && a.stage == b.stage && a.tp == b.tp;
      case group_axis::context_data: return a.stage == b.stage && a.tp == b.tp;
    }
    return false;
  }
  // Devices of one replica's part in a gradient-reduction group along `axis` (the group
  // spans the data-parallel replicas too).
  static constexpr int reduction_devices(group_axis axis) {
    switch (axis) {
      case group_axis::part_data: return part_devices;
      case group_axis::depth_data: return part_devices / (mesh_side * mesh_side);
      case group_axis::col_data:
      case group_axis::plane_data: return part_devices / mesh_side;
      case group_axis::context_data: return context;
      default: return 1;
    }
  }
  // Members of `rank`'s group along `axis`, in rank order, into out[]; returns the count.
  template <std::size_t N>
  static constexpr int group(group_axis axis, int rank, int world, std::array<int, N>& out) {
    int n = 0;
    for (int r = 0; r < world; ++r)
      if (same_group(axis, rank, r, world) && n < static_cast<int>(N)) out[idx(n++)] = r;
    return n;
  }
};

}  // namespace detail
}  // namespace strata
