#pragma once
// Communicator suite, point to point: send/recv pairs, sendrecv ring shifts, grouped
// exchanges (rings in both directions, pipelines with no_peer ends, self exchange)
// mixing element types. Messages between two ranks are posted in the same order on
// both sides: NCCL matches by posting order and ignores tags (MPI's matching by tag
// alone is tested in test_comm_mpi.cpp).
#include "comm_suite_common.hpp"

namespace comm_suite {

TEST_CASE("comm: send/recv between rank pairs, several types in a row") {
  C& c = P::world();
  const int np = c.size(), r = c.rank();
  INFO("rank " << r << " of " << np);
  const int partner = r % 2 == 0 ? r + 1 : r - 1;
  // A standalone send to oneself need not complete (NCCL): pairs of distinct ranks only.
  if (partner >= np) return;
  const std::size_t n = std::size_t(1) << 15;  // past MPI's eager limit: a real rendezvous
  auto a = put(c, r % 2 == 0 ? tagged_block<double>(r, n) : std::vector<double>(n, -1.0));
  auto idx = put(c, r % 2 == 0 ? tagged_block<std::int64_t>(r, 5) : std::vector<std::int64_t>(5, -1));
  auto h = put(c, r % 2 == 0 ? std::vector<bf16>(n, bf16(0.0f)) : tagged_block<bf16>(r, n));
  if (r % 2 == 0) {
    c.send(a.data(), n, partner, 5);
    c.send(idx.data(), 5, partner, 9);
    c.recv(h.data(), n, partner, 11);
    CHECK(count_differences(take(c, h.data(), n), tagged_block<bf16>(partner, n)) == 0);
  } else {
    c.recv(a.data(), n, partner, 5);
    c.recv(idx.data(), 5, partner, 9);
    c.send(h.data(), n, partner, 11);
    CHECK(count_differences(take(c, a.data(), n), tagged_block<double>(partner, n)) == 0);
    CHECK(count_differences(take(c, idx.data(), 5), tagged_block<std::int64_t>(partner, 5)) == 0);
  }
  c.synchronize();
}

TEST_CASE_TEMPLATE("comm: sendrecv shifts a ring by one (to oneself on one rank)", T, float, double, std::int32_t,
                   std::int64_t, bf16, f16) {
  C& c = P::world();
  const int np = c.size(), r = c.rank();
  INFO("rank " << r << " of " << np);
  const int next = (r + 1) % np, prev = (r + np - 1) % np;
  const std::size_t n = std::size_t(1) << 16;
  auto out = put(c, tagged_block<T>(r, n)), in = put(c, std::vector<T>(n, of<T>(-7)));
  c.sendrecv(out.data(), n, next, in.data(), n, prev, 7);
  CHECK(count_differences(take(c, in.data(), n), tagged_block<T>(prev, n)) == 0);
}

TEST_CASE("comm: a grouped ring exchange in both directions with mixed types does not deadlock") {
  C& c = P::world();
  const int np = c.size(), r = c.rank();
  INFO("rank " << r << " of " << np);
  const int next = (r + 1) % np, prev = (r + np - 1) % np;
  // Every rank sends to both neighbours before receiving; with blocking sends of
  // rendezvous-sized messages this is the classic deadlock. Per peer the receives
  // follow the order of the sends, also when next == prev (two ranks) or self (one).
  const std::size_t n = std::size_t(1) << 16;
  auto fwd = put(c, tagged_block<float>(r, n)), from_prev = put(c, std::vector<float>(n, 0.5f));
  auto meta = put(c, std::vector<std::int64_t>{r, std::int64_t(r) * r}),
       meta_in = put(c, std::vector<std::int64_t>(2, -1));
  auto bwd = put(c, tagged_block<bf16>(r, n)), from_next = put(c, std::vector<bf16>(n, bf16(0.5f)));
  // no_peer entries among them are skipped.
  const p2p_op ops[] = {send_op(fwd.data(), n, next, 1),        send_op(meta.data(), 2, next, 2),
                        send_op(fwd.data(), n, no_peer, 1),     send_op(bwd.data(), n, prev, 3),
                        recv_op(from_prev.data(), n, prev, 1),  recv_op(meta_in.data(), 2, prev, 2),
                        recv_op(meta_in.data(), 2, no_peer, 2), recv_op(from_next.data(), n, next, 3)};
  c.group(ops);
  CHECK(count_differences(take(c, from_prev.data(), n), tagged_block<float>(prev, n)) == 0);
  CHECK(take(c, meta_in.data(), 2) == std::vector<std::int64_t>{prev, std::int64_t(prev) * prev});
  CHECK(count_differences(take(c, from_next.data(), n), tagged_block<bf16>(next, n)) == 0);
}

TEST_CASE("comm: a pipeline exchange skips no_peer at both ends") {
  C& c = P::world();
  const int np = c.size(), r = c.rank();
  INFO("rank " << r << " of " << np);
  const int prev = r > 0 ? r - 1 : no_peer, next = r + 1 < np ? r + 1 : no_peer;
  const std::size_t n = std::size_t(1) << 14;
  // bf16 activations forward; float gradients and int64 metadata backward; one group.
  const bf16 unset = bf16::from_bits(0x7fc1);
  auto act = put(c, tagged_block<bf16>(r, n)), act_in = put(c, std::vector<bf16>(n, unset));
  auto grad = put(c, std::vector<float>(n, -(r + 0.5f))), grad_in = put(c, std::vector<float>(n, 7.0f));
  auto meta = put(c, std::vector<std::int64_t>{r, 10 * r}), meta_in = put(c, std::vector<std::int64_t>(2, -1));
  c.group({send_op(act.data(), n, next, 0), recv_op(act_in.data(), n, prev, 0), send_op(grad.data(), n, prev, 1),
           send_op(meta.data(), 2, prev, 2), recv_op(grad_in.data(), n, next, 1), recv_op(meta_in.data(), 2, next, 2)});
  CHECK(count_differences(take(c, act_in.data(), n),
                          prev == no_peer ? std::vector<bf16>(n, unset) : tagged_block<bf16>(prev, n)) == 0);
  CHECK(take(c, grad_in.data(), n) == std::vector<float>(n, next == no_peer ? 7.0f : -(next + 0.5f)));
  CHECK(take(c, meta_in.data(), 2) ==
        (next == no_peer ? std::vector<std::int64_t>{-1, -1} : std::vector<std::int64_t>{next, 10 * next}));

  // sendrecv, send and recv accept no_peer too; only no_peer entries do nothing.
  auto v = put(c, std::vector<std::int32_t>{r}), got = put(c, std::vector<std::int32_t>{-5});
  c.sendrecv(v.data(), 1, next, got.data(), 1, prev, 2);
  CHECK(take(c, got.data(), 1)[0] == (prev == no_peer ? -5 : prev));
  auto untouched = put(c, std::vector<std::int32_t>{-9});
  c.group({send_op(v.data(), 1, no_peer, 3), recv_op(untouched.data(), 1, no_peer, 3)});
  c.send(v.data(), 1, no_peer, 4);
  c.recv(untouched.data(), 1, no_peer, 4);
  CHECK(take(c, untouched.data(), 1)[0] == -9);
}

TEST_CASE("comm: a rank exchanges with itself inside a group") {
  C& c = P::world();
  const int r = c.rank();
  INFO("rank " << r << " of " << c.size());
  const std::size_t n = std::size_t(1) << 15;
  // The receive is posted first: a group completes as a whole.
  auto a = put(c, tagged_block<double>(r, n)), b = put(c, std::vector<double>(n, -1.0));
  auto ha = put(c, tagged_block<bf16>(r, 100)), hb = put(c, std::vector<bf16>(100, bf16(0.0f)));
  c.group({recv_op(b.data(), n, r, 0), recv_op(hb.data(), 100, r, 1), send_op(a.data(), n, r, 0),
           send_op(ha.data(), 100, r, 1)});
  CHECK(count_differences(take(c, b.data(), n), tagged_block<double>(r, n)) == 0);
  CHECK(count_differences(take(c, hb.data(), 100), tagged_block<bf16>(r, 100)) == 0);
}

}  // namespace comm_suite
