#pragma once
// Communicator suite, collectives: all_reduce, reduce_scatter, all_gather, broadcast,
// all_to_all for every comm_scalar type (bf16 and f16 included), with their in-place forms,
// and zero-count calls.
#include "comm_suite_common.hpp"

namespace comm_suite {

TEST_CASE_TEMPLATE("comm: all_reduce sum/max/min, on the world and on a sub-communicator", T, float, double,
                   std::int32_t, std::int64_t, bf16, f16) {
  C& c = P::world();
  const int np = c.size(), r = c.rank();
  INFO("rank " << r << " of " << np);
  if (is_half<T> && np > kExactRanks) return;  // the same decision on every rank
  C parity = c.split(r % 2, r, "parity");
  std::vector<int> everyone = iota_ranks(np), same_parity;
  for (int q = 0; q < np; ++q)
    if (q % 2 == r % 2) same_parity.push_back(q);
  struct target {
    C* comm;
    const std::vector<int>* members;
  };
  for (const target& t : {target{&c, &everyone}, target{&parity, &same_parity}})
    for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(1001), std::size_t(1) << 16})
      for (reduce_op op : kOps) {
        INFO(op_name(op) << " n=" << n << " over " << t.comm->size() << " ranks");
        std::vector<T> x(n), want(n);
        for (std::size_t i = 0; i < n; ++i) {
          x[i] = of<T>(reduce_input<T>(r, i));
          want[i] = reduced<T>(op, *t.members, i);
        }
        auto b = put(*t.comm, x);
        t.comm->all_reduce(b.data(), n, op);  // in place
        CHECK(count_differences(take(*t.comm, b.data(), n), want) == 0);
      }
}

TEST_CASE_TEMPLATE("comm: reduce_scatter, out of place and in both in-place forms", T, float, double, std::int32_t,
                   std::int64_t, bf16, f16) {
  C& c = P::world();
  const int np = c.size(), r = c.rank();
  INFO("rank " << r << " of " << np);
  if (is_half<T> && np > kExactRanks) return;
  const std::size_t n = 257, total = n * static_cast<std::size_t>(np), base = static_cast<std::size_t>(r) * n;
  const std::vector<int> everyone = iota_ranks(np);
  std::vector<T> x(total);
  for (std::size_t k = 0; k < total; ++k) x[k] = of<T>(reduce_input<T>(r, k));
  for (reduce_op op : kOps) {
    INFO(op_name(op));
    std::vector<T> want(n);
    for (std::size_t j = 0; j < n; ++j) want[j] = reduced<T>(op, everyone, base + j);
    auto send = put(c, x), recv = put(c, std::vector<T>(n, of<T>(-1)));
    c.reduce_scatter(send.data(), recv.data(), n, op);
    CHECK(count_differences(take(c, recv.data(), n), want) == 0);
    // recv == send (MPI's in-place form): the result in the first block.
    auto first = put(c, x);
    c.reduce_scatter(first.data(), first.data(), n, op);
    CHECK(count_differences(take(c, first.data(), n), want) == 0);
    // recv == send + rank * n (NCCL's in-place form): the result in the caller's own block.
    auto own = put(c, x);
    c.reduce_scatter(own.data(), own.data() + base, n, op);
    CHECK(count_differences(take(c, own.data() + base, n), want) == 0);
  }
}

TEST_CASE_TEMPLATE("comm: all_gather, out of place, in place and aliased", T, float, double, std::int32_t, std::int64_t,
                   bf16, f16) {
  C& c = P::world();
  const int np = c.size(), r = c.rank();
  INFO("rank " << r << " of " << np);
  const std::size_t n = 257, total = n * static_cast<std::size_t>(np), base = static_cast<std::size_t>(r) * n;
  const auto mine = tagged_block<T>(r, n);
  std::vector<T> want;
  for (int q = 0; q < np; ++q) {
    const auto b = tagged_block<T>(q, n);
    want.insert(want.end(), b.begin(), b.end());
  }
  const T filler = of<T>(-7);
  auto send = put(c, mine), recv = put(c, std::vector<T>(total, filler));
  c.all_gather(send.data(), recv.data(), n);
  CHECK(count_differences(take(c, recv.data(), total), want) == 0);
  // NCCL's in-place form: the caller's block already at recv + rank * n.
  std::vector<T> placed(total, filler);
  std::copy(mine.begin(), mine.end(), placed.begin() + static_cast<std::ptrdiff_t>(base));
  auto inplace = put(c, placed);
  c.all_gather(inplace.data() + base, inplace.data(), n);
  CHECK(count_differences(take(c, inplace.data(), total), want) == 0);
  // Any other overlap (send == recv): the backend stages the send block.
  std::vector<T> front(total, filler);
  std::copy(mine.begin(), mine.end(), front.begin());
  auto alias = put(c, front);
  c.all_gather(alias.data(), alias.data(), n);
  CHECK(count_differences(take(c, alias.data(), total), want) == 0);
}

TEST_CASE_TEMPLATE("comm: broadcast from every root", T, float, double, std::int32_t, std::int64_t, bf16, f16) {
  C& c = P::world();
  const int np = c.size(), r = c.rank();
  INFO("rank " << r << " of " << np);
  const std::size_t n = 333;
  for (int root = 0; root < np; ++root) {
    INFO("root " << root);
    auto b = put(c, r == root ? tagged_block<T>(root, n) : std::vector<T>(n, of<T>(-7)));
    c.broadcast(b.data(), n, root);
    CHECK(count_differences(take(c, b.data(), n), tagged_block<T>(root, n)) == 0);
  }
}

TEST_CASE_TEMPLATE("comm: all_to_all, out of place and in place", T, float, double, std::int32_t, std::int64_t, bf16,
                   f16) {
  C& c = P::world();
  const int np = c.size(), r = c.rank();
  INFO("rank " << r << " of " << np);
  const std::size_t n = 33, total = n * static_cast<std::size_t>(np);
  // Block p of rank r's input is addressed to rank p.
  std::vector<T> x(total), want(total);
  for (int p = 0; p < np; ++p)
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t at = static_cast<std::size_t>(p) * n + i;
      x[at] = tagged<T>(r, static_cast<std::size_t>(p) * n + i);
      want[at] = tagged<T>(p, static_cast<std::size_t>(r) * n + i);
    }
  auto send = put(c, x), recv = put(c, std::vector<T>(total, of<T>(-7)));
  c.all_to_all(send.data(), recv.data(), n);
  CHECK(count_differences(take(c, recv.data(), total), want) == 0);
  auto inplace = put(c, x);
  c.all_to_all(inplace.data(), inplace.data(), n);
  CHECK(count_differences(take(c, inplace.data(), total), want) == 0);
}

TEST_CASE("comm: zero-count collectives and exchanges do nothing") {
  C& c = P::world();
  const int np = c.size(), r = c.rank();
  INFO("rank " << r << " of " << np);
  const int next = (r + 1) % np, prev = (r + np - 1) % np;
  auto a = put(c, std::vector<float>{}), b = put(c, std::vector<float>{});
  auto keep = put(c, std::vector<float>{42.0f});  // a real buffer, passed with count 0
  for (reduce_op op : kOps) {
    c.all_reduce(a.data(), 0, op);
    c.all_reduce(keep.data(), 0, op);
    c.reduce_scatter(a.data(), b.data(), 0, op);
  }
  c.all_gather(a.data(), b.data(), 0);
  c.broadcast(keep.data(), 0, np - 1);
  c.all_to_all(a.data(), b.data(), 0);
  c.sendrecv(a.data(), 0, next, b.data(), 0, prev, 3);
  c.group({send_op(keep.data(), 0, next, 4), recv_op(keep.data(), 0, prev, 4)});
  CHECK(take(c, keep.data(), 1)[0] == 42.0f);
  CHECK(all_ranks(c, true));
}

}  // namespace comm_suite
