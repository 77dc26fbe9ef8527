#pragma once
// Communicator suite, host-synchronous operations and sub-communicators: agree, split
// and group_of (every rank throws the same comm_error on bad arguments), the groups
// of a data x pipeline x tensor mesh, size-1 sub-communicators running every
// operation, and argument errors that leave the communicator usable.
#include <string>
#include <utility>

#include "comm_suite_common.hpp"

namespace comm_suite {

TEST_CASE("comm: ranks, size and name; barrier") {
  C& c = P::world();
  const int np = c.size(), r = c.rank();
  INFO("rank " << r << " of " << np);
  CHECK(np >= 1);
  CHECK((r >= 0 && r < np));
  CHECK(!std::string(c.name()).empty());
  c.barrier();
  // Every rank has its own number.
  auto mine = put(c, std::vector<std::int32_t>{r}), all = put(c, std::vector<std::int32_t>(std::size_t(np), -1));
  c.all_gather(mine.data(), all.data(), 1);
  const auto got = take(c, all.data(), std::size_t(np));
  for (int q = 0; q < np; ++q) CHECK(got[std::size_t(q)] == q);
  c.synchronize();
}

TEST_CASE("comm: agree throws the failing rank's message, identically on every rank") {
  C& c = P::world();
  const int np = c.size(), r = c.rank();
  INFO("rank " << r << " of " << np);
  CHECK_NOTHROW(c.agree(true, "never shown"));
  const int bad = np - 1;
  const std::string e =
      comm_error_of([&] { c.agree(r != bad, "batch size 7 on rank " + std::to_string(r) + " is not divisible by 2"); });
  CHECK(contains(e, "[found by rank " + std::to_string(bad) + " of " + std::to_string(np)));
  CHECK(contains(e, "batch size 7 on rank " + std::to_string(bad) + " is not divisible by 2"));
  CHECK(contains(e, std::string(1, '\'').append(c.name()).append(1, '\'')));  // names the communicator
  CHECK(same_everywhere(c, e));
  // A failed check is not a communication failure: the communicator goes on.
  CHECK(all_ranks(c, true));
}

TEST_CASE("comm: split orders ranks by key, names the result, and refuses a negative color everywhere") {
  C& c = P::world();
  const int np = c.size(), r = c.rank();
  INFO("rank " << r << " of " << np);
  // Parity groups in descending rank order (key -r).
  C sub = c.split(r % 2, -r, "data");
  int want_size = 0, want_rank = 0;
  for (int q = 0; q < np; ++q)
    if (q % 2 == r % 2) {
      ++want_size;
      if (q > r) ++want_rank;
    }
  CHECK(sub.name() == "data");
  CHECK(sub.size() == want_size);
  CHECK(sub.rank() == want_rank);
  auto b = put(sub, std::vector<std::int32_t>{r + 1});
  sub.all_reduce(b.data(), 1, reduce_op::sum);
  int want = 0;
  for (int q = r % 2; q < np; q += 2) want += q + 1;
  CHECK(take(sub, b.data(), 1)[0] == want);
  sub.barrier();
  // Without a name: one derived from the parent's.
  C same = c.split(0, r);
  CHECK(same.size() == np);
  CHECK(same.rank() == r);
  CHECK(std::string(same.name()).starts_with(std::string(c.name()) + ".split"));
  // agree first: no rank is left inside the split.
  const std::string e = comm_error_of([&] { (void)c.split(r == 0 ? -1 : 0, 0); });
  CHECK(contains(e, "color must be >= 0"));
  CHECK(same_everywhere(c, e));
  CHECK(all_ranks(c, true));
}

// (data, pipeline, tensor) sizes of a mesh over np ranks.
struct mesh {
  int dp, pp, tp;
};
inline mesh mesh_for(int np) {
  switch (np) {
    case 8: return {2, 2, 2};
    case 4: return {1, 2, 2};
    case 2: return {1, 1, 2};
    default: return {np, 1, 1};
  }
}

TEST_CASE("comm: data, pipeline and tensor groups from split, group_of and group_from_partition") {
  C& c = P::world();
  const int np = c.size(), r = c.rank();
  INFO("rank " << r << " of " << np);
  const mesh m = mesh_for(np);
  // rank = d (pp tp) + p tp + t
  const int d = r / (m.pp * m.tp), p = (r / m.tp) % m.pp, t = r % m.tp;
  std::vector<int> tensor_members, data_members, pipe_members;
  for (int k = 0; k < m.tp; ++k) tensor_members.push_back(d * m.pp * m.tp + p * m.tp + k);
  for (int k = 0; k < m.dp; ++k) data_members.push_back(k * m.pp * m.tp + p * m.tp + t);
  for (int k = 0; k < m.pp; ++k) pipe_members.push_back(d * m.pp * m.tp + k * m.tp + t);
  // The sum over a group of (world rank + i) at i, checked against its member list.
  auto sums_ok = [&](C& g, const std::vector<int>& members) {
    const std::size_t n = 50;
    std::vector<double> v(n), want(n, 0.0);
    for (std::size_t i = 0; i < n; ++i) {
      v[i] = r + static_cast<double>(i);
      for (int q : members) want[i] += q + static_cast<double>(i);
    }
    auto b = put(g, v);
    g.all_reduce(b.data(), n, reduce_op::sum);
    return take(g, b.data(), n) == want;
  };

  C tensor = c.split(d * m.pp + p, t, "tensor");
  C data = c.split(p * m.tp + t, d, "data");
  C pipe = c.split(d * m.tp + t, p, "pipeline");
  CHECK(tensor.size() == m.tp);
  CHECK(tensor.rank() == t);
  CHECK(data.size() == m.dp);
  CHECK(data.rank() == d);
  CHECK(pipe.size() == m.pp);
  CHECK(pipe.rank() == p);
  CHECK(sums_ok(tensor, tensor_members));
  CHECK(sums_ok(data, data_members));
  CHECK(sums_ok(pipe, pipe_members));

  // The same groups from explicit rank lists, and from a full partition (what a plan computes).
  C tensor2 = c.group_of(tensor_members);
  C data2 = c.group_of(data_members);
  CHECK(tensor2.size() == m.tp);
  CHECK(tensor2.rank() == t);
  CHECK(data2.size() == m.dp);
  CHECK(data2.rank() == d);
  CHECK(sums_ok(tensor2, tensor_members));
  CHECK(sums_ok(data2, data_members));
  std::vector<std::vector<int>> pipe_groups;
  for (int dd = 0; dd < m.dp; ++dd)
    for (int tt = 0; tt < m.tp; ++tt) {
      std::vector<int> g;
      for (int pp = 0; pp < m.pp; ++pp) g.push_back(dd * m.pp * m.tp + pp * m.tp + tt);
      pipe_groups.push_back(g);
    }
  C pipe2 = group_from_partition(c, std::span<const std::vector<int>>(pipe_groups));
  CHECK(pipe2.size() == m.pp);
  CHECK(pipe2.rank() == p);
  CHECK(sums_ok(pipe2, pipe_members));

  // The list's order is the new ranks' order; a sub-communicator splits again.
  const std::vector<int> reversed(tensor_members.rbegin(), tensor_members.rend());
  C tensor_rev = c.group_of(reversed);
  CHECK(tensor_rev.rank() == m.tp - 1 - t);
  C tensor_rev2 = tensor.split(0, -t);
  CHECK(tensor_rev2.rank() == m.tp - 1 - t);
  auto who = put(tensor_rev2, std::vector<std::int32_t>{tensor_rev2.rank() == 0 ? r : -1});
  tensor_rev2.broadcast(who.data(), 1, 0);
  CHECK(take(tensor_rev2, who.data(), 1)[0] == tensor_members.back());

  // A moved communicator keeps working.
  C moved = std::move(data2);
  CHECK(sums_ok(moved, data_members));
}

TEST_CASE("comm: bad group_of lists fail on every rank instead of hanging") {
  C& c = P::world();
  const int np = c.size(), r = c.rank();
  INFO("rank " << r << " of " << np);
  // Rank 0 leaves itself out of its list.
  const std::vector<int> mine = r == 0 ? std::vector<int>{} : std::vector<int>{r};
  const std::string e1 = comm_error_of([&] { (void)c.group_of(mine); });
  CHECK(contains(e1, "group_of"));
  CHECK(same_everywhere(c, e1));
  // A rank outside the communicator.
  const std::vector<int> outside = {r, np};
  const std::string e2 = comm_error_of([&] { (void)c.group_of(outside); });
  CHECK(contains(e2, "group_of"));
  CHECK(same_everywhere(c, e2));
  // Ranks 0 and 1 pass different lists for the same group.
  if (np >= 2) {
    const std::vector<int> l = r == 0 ? std::vector<int>{0, 1} : r == 1 ? std::vector<int>{1, 0} : std::vector<int>{r};
    const std::string e3 = comm_error_of([&] { (void)c.group_of(l); });
    CHECK(contains(e3, "group_of"));
    CHECK(same_everywhere(c, e3));
  }
  CHECK(all_ranks(c, true));
}

TEST_CASE("comm: a size-1 sub-communicator runs every operation") {
  C& c = P::world();
  const int r = c.rank();
  INFO("rank " << r << " of " << c.size());
  C solo = c.split(r, 0);
  REQUIRE(solo.size() == 1);
  CHECK(solo.rank() == 0);
  const std::size_t n = 100;
  const auto x = tagged_block<float>(r, n);
  auto b = put(solo, x);
  for (reduce_op op : kOps) solo.all_reduce(b.data(), n, op);  // identities
  CHECK(take(solo, b.data(), n) == x);
  auto out = put(solo, std::vector<float>(n, -1.0f));
  solo.reduce_scatter(b.data(), out.data(), n, reduce_op::sum);
  CHECK(take(solo, out.data(), n) == x);
  auto gathered = put(solo, std::vector<float>(n, -1.0f));
  solo.all_gather(b.data(), gathered.data(), n);
  CHECK(take(solo, gathered.data(), n) == x);
  solo.broadcast(b.data(), n, 0);
  auto swapped = put(solo, std::vector<float>(n, -1.0f));
  solo.all_to_all(b.data(), swapped.data(), n);
  CHECK(take(solo, swapped.data(), n) == x);
  auto ring = put(solo, std::vector<float>(n, -1.0f));
  solo.sendrecv(b.data(), n, 0, ring.data(), n, 0, 5);
  CHECK(take(solo, ring.data(), n) == x);
  auto grouped = put(solo, std::vector<bf16>(n, bf16(0.0f)));
  auto hb = put(solo, tagged_block<bf16>(r, n));
  solo.group({send_op(hb.data(), n, 0, 6), recv_op(grouped.data(), n, 0, 6)});
  CHECK(count_differences(take(solo, grouped.data(), n), tagged_block<bf16>(r, n)) == 0);
  solo.barrier();
  const std::string e = comm_error_of([&] { solo.agree(false, "alone"); });
  CHECK(contains(e, "[found by rank 0 of 1"));
  CHECK(contains(e, "alone"));
  const std::vector<int> me = {0};
  C again = solo.group_of(me);
  CHECK(again.size() == 1);
  CHECK(solo.split(0, 0).size() == 1);
  CHECK(all_ranks(c, true));
}

TEST_CASE("comm: invalid peers, roots and null buffers throw comm_error and leave the communicator usable") {
  C& c = P::world();
  const int np = c.size(), r = c.rank();
  INFO("rank " << r << " of " << np);
  auto b = put(c, std::vector<float>(4, 1.0f));
  CHECK_THROWS_AS(c.send(b.data(), 4, np, 0), comm_error);
  CHECK_THROWS_AS(c.recv(b.data(), 4, np, 0), comm_error);
  CHECK_THROWS_AS(c.group({send_op(b.data(), 4, np, 0)}), comm_error);
  CHECK_THROWS_AS(c.broadcast(b.data(), 4, np), comm_error);
  CHECK(contains(comm_error_of([&] { c.all_reduce(static_cast<float*>(nullptr), 3, reduce_op::sum); }), "null buffer"));
  CHECK(contains(comm_error_of([&] { c.broadcast(static_cast<double*>(nullptr), 3, 0); }), "null buffer"));
  CHECK(all_ranks(c, true));
}

}  // namespace comm_suite
