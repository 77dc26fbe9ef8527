#pragma once
// One layout conversion of the lowered program, executed over the part's devices:
// the collective the planner chose (plan/sharding.hpp convert(), OneFlow's boxing),
// with feature splits packed into contiguous per-device blocks through the staging
// buffer the lowering reserved. The planner's byte counts (comm_desc) are these calls.
#include <cstddef>
#include <stdexcept>
#include <string>

#include "strata/core/communicator.hpp"
#include "strata/plan/lower.hpp"

namespace strata::exec {

// `block`, `mesh`: for S(0,-1) layouts, the block this device holds and the mesh's cuts.
template <class Queue, class T, class Comm>
void run_conversion(Queue& q, Comm& part, const lower::conversion& c, const T* src, T* dst, T* staging, int n,
                    int index, strata::detail::act_block block = {}, strata::detail::mesh_factors mesh = {}) {
  const std::size_t R = static_cast<std::size_t>(c.rows), C = static_cast<std::size_t>(c.cols);
  const std::size_t N = static_cast<std::size_t>(n), I = static_cast<std::size_t>(index);
  const std::size_t r = R / N, w = C / N;  // rows, columns of one device's block
  const sbp from = c.from, to = c.to;
  if (from == sbp::broadcast && to == sbp::split_batch) {
    copy(q, r * C, src + I * r * C, dst);  // this device's rows: a slice, no traffic
  } else if (from == sbp::broadcast && to == sbp::block) {
    // this device's rows and features of the mesh's grid: a slice, no traffic
    const std::size_t br = R / std::size_t(mesh.rows), bc = C / std::size_t(mesh.features);
    copy_2d(q, br, bc, src + std::size_t(block.row) * br * C + std::size_t(block.feature) * bc, C, dst, bc);
  } else if (from == sbp::broadcast && to == sbp::split_feature) {
    copy_2d(q, R, w, src + I * w, C, dst, w);  // this device's columns
  } else if (from == sbp::partial && to == sbp::broadcast) {
    if (src != dst) copy(q, R * C, src, dst);
    part.all_reduce(dst, R * C, comm::reduce_op::sum);
  } else if (from == sbp::partial && to == sbp::split_batch) {
    part.reduce_scatter(src, dst, r * C, comm::reduce_op::sum);
  } else if (from == sbp::partial && to == sbp::split_feature) {
    for (std::size_t d = 0; d < N; ++d) copy_2d(q, R, w, src + d * w, C, staging + d * R * w, w);
    part.reduce_scatter(staging, dst, R * w, comm::reduce_op::sum);
  } else if (from == sbp::split_batch && to == sbp::broadcast) {
    part.all_gather(src, dst, r * C);
  } else if (from == sbp::split_feature && to == sbp::broadcast) {
    part.all_gather(src, staging, R * w);  // blocks [device][rows][cols / n]
    for (std::size_t d = 0; d < N; ++d) copy_2d(q, R, w, staging + d * R * w, w, dst + d * w, C);
  } else if (from == sbp::split_batch && to == sbp::split_feature) {
    // my rows, every device's columns, in blocks [device][rows / n][cols / n]
    for (std::size_t d = 0; d < N; ++d) copy_2d(q, r, w, src + d * w, C, staging + d * r * w, w);
    part.all_to_all(staging, dst, r * w);  // arrives [source][rows / n][cols / n] = [rows][cols / n]
  } else if (from == sbp::split_feature && to == sbp::split_batch) {
    part.all_to_all(src, staging, r * w);  // my columns are [destination][rows / n][cols / n] already
    for (std::size_t s = 0; s < N; ++s) copy_2d(q, r, w, staging + s * r * w, w, dst + s * w, C);
  } else {
    throw std::logic_error("strata: the lowered program holds a conversion from " + std::string(to_string(from)) +
                           " to " + std::string(to_string(to)) + ", which no executor runs");
  }
}

}  // namespace strata::exec
