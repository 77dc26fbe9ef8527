#pragma once
// Ring attention (Context<N> with ContextRing; Li et al.'s sequence parallelism, Megatron's
// p2p context parallelism): device k of the part's N holds pieces k and 2N − 1 − k of L
// positions of every sequence (core/sbp.hpp's context_segments) and keeps its queries; the
// key/value blocks — both pieces of a device — travel around the ring, k sending to k + 1
// and receiving from k − 1. At step s device k attends its queries to the block of device
// j = (k − s) mod N; the exchange that brings step s + 1's block is posted before step s's
// tiles (core/posted_group.hpp) into the other of two buffers, so that it overlaps them where
// the communicator can wait for a posted group later (MPI; a group on NCCL runs in stream
// order with the tiles).
//
// Forward: each (query piece, key piece) pair is one flash attention call (backend/
// attention.hpp) at the key piece's global positions (k0). Under a causal mask a key piece
// after the query piece is skipped: the pieces are of one length, so one before is seen
// whole and the same one is the diagonal — no call has a query that sees no key. The first
// pair a query piece meets (at step 0: its diagonal, or a whole piece before it) writes o
// and lse; every later one writes a partial that attention_merge folds in by log-sum-exp.
//
// Backward: with the final o and lse each pair's probabilities are exact (p_ij = exp(s_ij −
// lse_i) whatever subset of the keys a call sees, δ_i = do_i·o_i with the final o), so each
// pair's flash backward gives its share of dq (summed here, at home) and of the block's dk
// and dv, which travel with the block and are summed on the way: k and v take N − 1 steps,
// their gradients N, the last one bringing each device's own home.
//
// Messages per call, each block two pieces of [k | v] (2·kv_size elements each): forward
// N − 1 blocks sent; backward N − 1 blocks and N gradient blocks — what the attention's
// context_shard lists. Memory: a few blocks and one pair's partials (ring_scratch_values),
// whatever N is: O(Seq/N), where the all-gather holds the whole sequence.
#include <array>
#include <cstddef>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "strata/core/communicator.hpp"
#include "strata/core/kernel_args.hpp"
#include "strata/core/posted_group.hpp"
#include "strata/core/sbp.hpp"

namespace strata::detail {

// One device's share of ring attention, per piece h (0, 1), head-major: its queries q[h]
// ([items, len, dh], q_size elements), its own keys and values kv[h] ([k | v], kv_size
// each), the attention's output o[h] and log-sum-exps lse[h] ([items, len]: rows).
template <class T, class L>
struct ring_share {
  std::array<const T*, 2> q{}, kv{};
  std::array<T*, 2> o{};
  std::array<L*, 2> lse{};
  std::size_t q_size = 0, kv_size = 0, rows = 0, dh = 0, len = 0;
};

// Piece h of every sequence of a device's rows lies in its stash, head-major, as [q | k | v]
// (piece_heads elements: q_size of q, kv_size of k and of v), the context after all of q,
// k, v of both pieces ([ctx_0 | ctx_1] from `context`), the log-sum-exps per piece (rows
// each) from `lse`.
template <class T, class L>
ring_share<T, L> ring_share_of(T* stash, T* context, L* lse, std::size_t piece_heads, std::size_t q_size,
                               std::size_t kv_size, std::size_t rows, std::size_t dh, std::size_t len) {
  ring_share<T, L> r{.q_size = q_size, .kv_size = kv_size, .rows = rows, .dh = dh, .len = len};
  for (std::size_t h = 0; h < 2; ++h) {
    r.q[h] = stash + h * piece_heads;
    r.kv[h] = stash + h * piece_heads + q_size;
    r.o[h] = context + h * q_size;
    r.lse[h] = lse + h * rows;
  }
  return r;
}

// Scratch of the ring, in values and in statistics: two blocks and two travelling gradient
// blocks of 4·kv_size, a step's own share of a gradient block (4·kv_size), one pair's
// partial o or dq (q_size) and dk, dv (2·kv_size); one partial lse.
constexpr long long ring_scratch_values(long long q_size, long long kv_size) { return 22 * kv_size + q_size; }
constexpr long long ring_scratch_stats(long long rows) { return rows; }

// The ring's messages in flight, on the context group's communicator.
template <class C>
using ring_messages = comm::posted_group<std::remove_reference_t<decltype(std::declval<C&>().part)>>;

// The ring's neighbour exchange: two pieces of `each` elements from `from` to the next
// device, into `into` from the previous one.
template <class C, class T>
void ring_post(C& c, ring_messages<C>& msgs,
               const std::array<const T*, 2>& from, const std::array<T*, 2>& into, std::size_t each, int tag) {
  const int next = (c.context_index + 1) % c.context, prev = (c.context_index + c.context - 1) % c.context;
  const std::array<comm::p2p_op, 4> ops{comm::send_op(from[0], each, next, tag), comm::send_op(from[1], each, next, tag),
                                        comm::recv_op(into[0], each, prev, tag), comm::recv_op(into[1], each, prev, tag)};
  msgs.post(*c.context_group, ops, true);
}
inline constexpr int ring_tag_kv = 30, ring_tag_grads = 31;

// Step s's block (device j's, at `cur`) on to the next device while the previous one's
// arrives in buffer s mod 2 of `blocks` (none after the last step): where it arrives.
template <class C, class T>
std::array<const T*, 2> ring_pass_block(C& c, ring_messages<C>& msgs,
                                        int s, const std::array<const T*, 2>& cur, T* blocks, std::size_t block) {
  if (s + 1 >= c.context) return {};
  T* b = blocks + std::size_t(s % 2) * 2 * block;
  ring_post(c, msgs, cur, std::array<T*, 2>{b, b + block}, block, ring_tag_kv);
  return {b, b + block};
}

// Query piece h's call against key piece g of device j's block; false where the causal
// mask hides the key piece from every query (a piece wholly after the query piece).
template <class Flash>
bool ring_call(Flash& flash_of, int n, int j, int h, int g, std::size_t len, backend::flash_shape& f) {
  f = flash_of(h);
  f.k_len = len;
  f.k0 = context_piece_pos0(n, j, g, static_cast<long long>(len));  // the layout's (plan/lower/parts.hpp)
  return !(f.causal && f.k0 > f.q0);
}

// `flash_of(h)` is query piece h's flash call (its q0, items, scale, mask, dropout); the
// ring sets each call's key piece (k0, k_len).
template <class C, class T, class L, class Flash>
void ring_attention_forward(C& c, const ring_share<T, L>& r, T* scratch, L* lse_tmp, Flash flash_of) {
  const int n = c.context, k = c.context_index;
  const std::size_t block = 2 * r.kv_size;  // one piece's [k | v]
  T* o_tmp = scratch + 16 * r.kv_size;
  ring_messages<C> msgs;
  std::array<const T*, 2> cur = r.kv;
  std::array<bool, 2> seen{};
  for (int s = 0; s < n; ++s) {
    const int j = (k - s + n) % n;
    const std::array<const T*, 2> next = ring_pass_block(c, msgs, s, cur, scratch, block);
    for (int h = 0; h < 2; ++h)
      for (int g = 0; g < 2; ++g) {
        backend::flash_shape f;
        if (!ring_call(flash_of, n, j, h, g, r.len, f)) continue;
        const T *kh = cur[std::size_t(g)], *vh = kh + r.kv_size;
        const auto hh = std::size_t(h);
        if (!seen[hh]) {
          flash_attention_forward(c.q, f, r.q[hh], kh, vh, r.o[hh], r.lse[hh]);
          seen[hh] = true;
        } else {
          flash_attention_forward(c.q, f, r.q[hh], kh, vh, o_tmp, lse_tmp);
          attention_merge(c.q, r.rows, r.dh, r.o[hh], r.lse[hh], static_cast<const T*>(o_tmp),
                          static_cast<const L*>(lse_tmp));
        }
        msgs.drive(*c.context_group);
      }
    msgs.finish(*c.context_group);
    cur = next;
  }
}

// From the forward's share (o and lse final) and the output's gradient dout[h]: dq[h]
// (q_size each) and this device's own dk, dv into dkv_home[h] ([dk | dv] of piece h). A
// step's dk, dv are summed locally first and added to the block's travelling gradient
// only once that has arrived, so that its transfer overlaps the step's tiles too.
template <class C, class T, class L, class Flash>
void ring_attention_backward(C& c, const ring_share<T, L>& r, const std::array<const T*, 2>& dout,
                             const std::array<T*, 2>& dq, const std::array<T*, 2>& dkv_home, T* scratch,
                             Flash flash_of) {
  const int n = c.context, k = c.context_index;
  const std::size_t block = 2 * r.kv_size;
  T* grads = scratch + 8 * r.kv_size;  // two travelling gradient blocks after the two blocks
  T* local = scratch + 16 * r.kv_size;  // this step's share of the block's gradient
  T* dq_tmp = local + 2 * block;
  T* dkv_tmp = dq_tmp + r.q_size;
  const auto at = [&](T* base) { return std::array<T*, 2>{base, base + block}; };
  ring_messages<C> kv_msgs, grad_msgs;
  std::array<const T*, 2> cur = r.kv;
  std::array<bool, 2> dq_seen{};
  for (int s = 0; s < n; ++s) {
    const int j = (k - s + n) % n;
    const std::array<const T*, 2> next = ring_pass_block(c, kv_msgs, s, cur, scratch, block);
    // step 0 sums straight into the block it sends; later steps beside the one arriving
    const std::array<T*, 2> mine = at(s == 0 ? grads : local);
    std::array<bool, 2> d_seen{};
    for (int h = 0; h < 2; ++h)
      for (int g = 0; g < 2; ++g) {
        backend::flash_shape f;
        if (!ring_call(flash_of, n, j, h, g, r.len, f)) continue;
        const auto hh = std::size_t(h), gg = std::size_t(g);
        const T *kh = cur[gg], *vh = kh + r.kv_size;
        T* dq_out = dq_seen[hh] ? dq_tmp : dq[hh];
        T* dk_out = d_seen[gg] ? dkv_tmp : mine[gg];
        flash_attention_backward(c.q, f, r.q[hh], kh, vh, static_cast<const T*>(r.o[hh]), dout[hh],
                                 static_cast<const L*>(r.lse[hh]), dq_out, dk_out, dk_out + r.kv_size);
        if (dq_seen[hh]) axpy(c.q, r.q_size, 1.0, static_cast<const T*>(dq_tmp), dq[hh]);
        if (d_seen[gg]) axpy(c.q, block, 1.0, static_cast<const T*>(dkv_tmp), mine[gg]);
        dq_seen[hh] = d_seen[gg] = true;
        kv_msgs.drive(*c.context_group);
        grad_msgs.drive(*c.context_group);
      }
    // step 0 sees both key pieces of its own block (their diagonals): `mine` is whole
    if (s == 0 && !(d_seen[0] && d_seen[1])) throw std::logic_error("ring attention: a key piece unseen at step 0");
    // the block's gradient: the devices' before (arrived in grads[s % 2]) plus this step's
    std::array<T*, 2> sum = mine;
    if (s > 0) {
      grad_msgs.finish(*c.context_group);
      sum = at(grads + std::size_t(s % 2) * 2 * block);
      for (std::size_t g = 0; g < 2; ++g)
        if (d_seen[g]) axpy(c.q, block, 1.0, static_cast<const T*>(mine[g]), sum[g]);
    }
    // on to the next device, while the previous one's arrives in the other buffer; the
    // last step's arrives home
    const std::array<T*, 2> into = s + 1 < n ? at(grads + std::size_t((s + 1) % 2) * 2 * block) : dkv_home;
    ring_post(c, grad_msgs, std::array<const T*, 2>{sum[0], sum[1]}, into, block, ring_tag_grads);
    kv_msgs.finish(*c.context_group);
    cur = next;
  }
  grad_msgs.finish(*c.context_group);
}

}  // namespace strata::detail
