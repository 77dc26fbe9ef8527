#pragma once
// Attention's exchanges under Context<N> (layers/attention.hpp): each of the part's N devices
// holds pieces of every sequence in attention's head-major layout [parts][seqs][heads][L][dh].
// Two ways to let each query see every key:
//
//  * all-gather (Megatron's all-gather context parallelism): device k holds pieces k and
//    2N − 1 − k of L = Seq/2N positions (so that under a causal mask every device attends to
//    as many keys), gathers the whole sequences' k and v — gather_balanced — and attends its
//    own queries to them; the gradients of k and v, summed over every device's queries, go
//    back by reduce-scatter (scatter_balanced).
//  * all-to-all (DeepSpeed-Ulysses; one piece per device, L = Seq/N): heads and positions trade places — device j receives
//    heads [j·h/N, (j+1)·h/N) of every part for the whole sequences (to_whole_sequences) and
//    attends them; the result trades back (to_own_positions).
//
// The layout moves are heads_from_rows / rows_from_heads on blocks (backend/attention.hpp's
// permutations: out[p][s, h, t, :] = rows[s, t, h, p, :]), found through the queue as every
// layer finds its kernels; the collectives run on the context group (the part under Context<N>
// alone; under Context<N, Split<T>> the N devices of one tensor index).
#include <cstddef>

#include "strata/core/communicator.hpp"

namespace strata::detail {

// Load-balanced (device k holds pieces k and 2N − 1 − k of 2N): each device's two pieces
// [blocks][L·dh] → [blocks][2N·L][dh], block b of whole sequences. The second pieces arrive
// in device order, pieces 2N − 1 down to N: put in place by N copies before the layout move.
template <class C, class T>
void gather_balanced(C& c, const T* first, const T* second, std::size_t blocks, std::size_t len, std::size_t dh,
                     T* staging, T* whole) {
  const std::size_t n = std::size_t(c.context), chunk = blocks * len * dh;
  c.context_group->all_gather(first, staging, chunk);
  c.context_group->all_gather(second, whole, chunk);  // `whole` holds 2N chunks: scratch until the move
  for (std::size_t j = 0; j < n; ++j) copy(c.q, chunk, static_cast<const T*>(whole + j * chunk), staging + (2 * n - 1 - j) * chunk);
  heads_from_rows(c.q, std::size_t(1), 2 * n, blocks, std::size_t(1), len * dh, static_cast<const T*>(staging), whole);
}

// Its dual: [blocks][2N·L][dh] of whole sequences (this device's share of a sum; overwritten)
// → each device's two pieces, summed over the part.
template <class C, class T>
void scatter_balanced(C& c, T* whole, std::size_t blocks, std::size_t len, std::size_t dh, T* staging, T* first,
                      T* second) {
  const std::size_t n = std::size_t(c.context), chunk = blocks * len * dh;
  rows_from_heads(c.q, std::size_t(1), 2 * n, blocks, std::size_t(1), len * dh, static_cast<const T*>(whole), staging);
  c.context_group->reduce_scatter(staging, first, chunk, comm::reduce_op::sum);
  for (std::size_t j = 0; j < n; ++j) copy(c.q, chunk, static_cast<const T*>(staging + (2 * n - 1 - j) * chunk), whole + j * chunk);
  c.context_group->reduce_scatter(whole, second, chunk, comm::reduce_op::sum);
}

// [parts·seqs][n][h/n][L][dh] (all heads, own positions) → [parts·seqs·h/n][n·L][dh] (a
// head group, whole sequences): the group of device j goes to device j.
template <class C, class T>
void to_whole_sequences(C& c, const T* own, std::size_t outer, std::size_t group_heads, std::size_t len, std::size_t dh,
                        T* send, T* recv, T* whole) {
  const std::size_t n = std::size_t(c.context), block = group_heads * len * dh;
  heads_from_rows(c.q, outer, std::size_t(1), std::size_t(1), n, block, own, send);  // [n][outer][block]
  c.context_group->all_to_all(send, recv, outer * block);
  heads_from_rows(c.q, std::size_t(1), n, outer * group_heads, std::size_t(1), len * dh,
                           static_cast<const T*>(recv), whole);
}

// The inverse: a head group of whole sequences → all heads at this device's positions.
template <class C, class T>
void to_own_positions(C& c, const T* whole, std::size_t outer, std::size_t group_heads, std::size_t len, std::size_t dh,
                      T* send, T* recv, T* own) {
  const std::size_t n = std::size_t(c.context), block = group_heads * len * dh;
  rows_from_heads(c.q, std::size_t(1), n, outer * group_heads, std::size_t(1), len * dh, whole, send);
  c.context_group->all_to_all(send, recv, outer * block);
  rows_from_heads(c.q, outer, std::size_t(1), std::size_t(1), n, block, static_cast<const T*>(recv), own);
}

}  // namespace strata::detail
