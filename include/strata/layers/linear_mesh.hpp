#pragma once
// Linear under Colossal-AI's 2D, 2.5D and 3D tensor parallelism, on S(0,-1) blocks of
// rows × features. The collectives and their groups are the planner's (plan/sharding.hpp
// lists them; the executor hands the layer their communicators as c.mesh, in that order);
// the data movement around them is here. A rank's position in a group is its block
// there: the groups are ordered by rank, and the rank layout puts the mesh column fastest,
// then the row, then the depth.
#include <cstddef>
#include <type_traits>

#include "strata/core/communicator.hpp"
#include "strata/layers/layer.hpp"

namespace strata::detail {

// Weight-gradient parts (master values, `parts`: `group.size()` pieces) reduce-scattered
// over `group` into this device's piece (at `piece`), added to its gradient; the bias
// gradient is this device's column sums (the planner reduces them over the devices of
// the output feature block).
template <class C, class G>
void reduce_weight_grads(C& c, G& group, const typename C::master_type* parts, typename C::master_type* piece,
                         std::size_t n, bool bias) {
  static_assert(std::is_same_v<typename C::master_type, typename C::stat_type>,
                "weight-gradient scratch is in the statistics type");
  group.reduce_scatter(parts, piece, n, comm::reduce_op::sum);
  axpy(c.q, n, 1.0, static_cast<const typename C::master_type*>(piece), c.g[0]);
  if (bias) bias_grad(c.q, c.rows, c.out_cols, c.dy, c.g[1], true);
}

// ---- 2D / 2.5D: SUMMA on a q × q mesh (each depth layer of 2.5D on its own rows) ----------
// Device (i, j) holds X[i, j] (R × K), W[i, j] (K × N), and writes Y[i, j] (R × N);
// mesh[0] is its mesh row (ranks by j), mesh[1] its mesh column (ranks by i).

// Scratch, in values: an input block, a weight block, and the q partial input gradients;
// in master values (statistics type): the q partial weight gradients and their reduced block.
constexpr buffer_needs summa_memory(const local_dims& d) {
  const long long q = d.q, R = d.rows, K = d.in_cols, N = d.out_cols;
  return {.keep_input = true, .scratch_values = R * K + K * N + q * R * K, .scratch_stats = q * K * N + K * N};
}

// Y[i, j] = Σ_t X[i, t]·W[t, j] (+ b[j]): step t broadcasts X[i, t] along the row from
// device (i, t) and W[t, j] along the column from device (t, j).
template <class C>
void summa_forward(C& c, const typename C::value_type* bias) {
  using T = typename C::value_type;
  using S = gemm_scalar_t<T>;
  const std::size_t R = c.rows, K = c.in_cols, N = c.out_cols;
  auto& row = *c.mesh[0];
  auto& col = *c.mesh[1];
  T* xb = c.scratch_values;
  T* wb = xb + R * K;
  for (int t = 0; t < c.mesh_q; ++t) {
    if (row.rank() == t) copy(c.q, R * K, c.x, xb);
    row.broadcast(xb, R * K, t);
    if (col.rank() == t) copy(c.q, K * N, c.w[0], wb);
    col.broadcast(wb, K * N, t);
    const bool last = t + 1 == c.mesh_q;
    gemm_bias_act(c.q, backend::trans::N, backend::trans::N, R, N, K, S(1), xb, K, wb, N, S(t == 0 ? 0 : 1), c.y, N,
                  last ? bias : nullptr, backend::activation::none, static_cast<T*>(nullptr));
  }
}

// dW[t, j] = Σ_i X[i, t]ᵀ·dY[i, j]: step t broadcasts X[i, t] along the row, device (i, j)
// forms its part of every dW[t, j], and the column's reduce-scatter hands device (t, j)
// the sum. dX[i, t] = Σ_j dY[i, j]·W[t, j]ᵀ: step t broadcasts W[t, j] along the column,
// and the row's reduce-scatter sums the parts.
template <class C>
void summa_backward(C& c, bool bias) {
  using T = typename C::value_type;
  using S = gemm_scalar_t<T>;
  const std::size_t R = c.rows, K = c.in_cols, N = c.out_cols, Q = static_cast<std::size_t>(c.mesh_q);
  auto& row = *c.mesh[0];
  auto& col = *c.mesh[1];
  T* xb = c.scratch_values;
  T* wb = xb + R * K;
  T* dx_parts = wb + K * N;
  auto* dw_parts = c.scratch_stats;
  for (int t = 0; t < c.mesh_q; ++t) {
    if (row.rank() == t) copy(c.q, R * K, c.x, xb);
    row.broadcast(xb, R * K, t);
    gemm(c.q, backend::trans::T, backend::trans::N, K, N, R, S(1), xb, K, c.dy, N, S(0), dw_parts + std::size_t(t) * K * N,
         N);
  }
  reduce_weight_grads(c, col, dw_parts, dw_parts + Q * K * N, K * N, bias);
  if (!c.dx) return;
  for (int t = 0; t < c.mesh_q; ++t) {
    if (col.rank() == t) copy(c.q, K * N, c.w[0], wb);
    col.broadcast(wb, K * N, t);
    gemm(c.q, backend::trans::N, backend::trans::T, R, K, N, S(1), c.dy, N, wb, N, S(0), dx_parts + std::size_t(t) * R * K,
         K);
  }
  row.reduce_scatter(dx_parts, c.dx, R * K, comm::reduce_op::sum);
}

// ---- 3D: a q × q × q cube ---------------------------------------------------------------
// The input's features lie along one cube axis F, its rows are cut by the other two; the
// input is all-gathered along A (mesh[0]: R·q rows of one feature block), the weight —
// cut by feature blocks and again by mesh rows — along the column (mesh[1]: a K × N
// block), and the product's q partial sums reduce-scattered along F (mesh[2]), each device
// keeping R rows of one output feature block. Forward keeps the gathered X and W.

// Stash: the gathered input (q·R × K) and weight (K × N). Scratch: the partial output or
// gathered dY, and the partial dX, in values; the weight gradient block and its reduced
// piece in master values.
constexpr buffer_needs cube_memory(const local_dims& d) {
  const long long q = d.q, R = d.rows, K = d.in_cols, N = d.out_cols;
  return {.stash_values = q * R * K + K * N,
          .scratch_values = q * R * N + q * R * K,
          .scratch_stats = K * N + K * N / (q > 0 ? q : 1)};
}

template <class C>
void cube_forward(C& c, const typename C::value_type* bias) {
  using T = typename C::value_type;
  using S = gemm_scalar_t<T>;
  const std::size_t R = c.rows, K = c.in_cols, N = c.out_cols, Q = static_cast<std::size_t>(c.mesh_q);
  T* xg = c.stash_values;
  T* wg = xg + Q * R * K;
  T* y_parts = c.scratch_values;
  c.mesh[0]->all_gather(c.x, xg, R * K);
  c.mesh[1]->all_gather(c.w[0], wg, K / Q * N);
  gemm(c.q, backend::trans::N, backend::trans::N, Q * R, N, K, S(1), xg, K, wg, N, S(0), y_parts, N);
  c.mesh[2]->reduce_scatter(y_parts, c.y, R * N, comm::reduce_op::sum);
  if (bias)
    bias_activation_forward(c.q, backend::activation::none, R, N, static_cast<const T*>(c.y), bias, static_cast<T*>(nullptr),
                            c.y);
}

// dY gathered along F; dW = X̂ᵀ·dŶ reduce-scattered along the column (each device keeps
// its piece of W's block); dX = dŶ·Ŵᵀ reduce-scattered along A.
template <class C>
void cube_backward(C& c, bool bias) {
  using T = typename C::value_type;
  using S = gemm_scalar_t<T>;
  const std::size_t R = c.rows, K = c.in_cols, N = c.out_cols, Q = static_cast<std::size_t>(c.mesh_q);
  const T* xg = c.stash_values;
  const T* wg = xg + Q * R * K;
  T* dyg = c.scratch_values;
  T* dx_parts = dyg + Q * R * N;
  auto* dw_block = c.scratch_stats;
  c.mesh[2]->all_gather(c.dy, dyg, R * N);
  gemm(c.q, backend::trans::T, backend::trans::N, K, N, Q * R, S(1), xg, K, dyg, N, S(0), dw_block, N);
  reduce_weight_grads(c, *c.mesh[1], dw_block, dw_block + K * N, K / Q * N, bias);
  if (!c.dx) return;
  gemm(c.q, backend::trans::N, backend::trans::T, Q * R, K, N, S(1), dyg, N, wg, N, S(0), dx_parts, K);
  c.mesh[0]->reduce_scatter(dx_parts, c.dx, R * K, comm::reduce_op::sum);
}

}  // namespace strata::detail
