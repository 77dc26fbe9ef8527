// MPI communicator tests: every collective against closed-form values.
// mpi-ranks: 1 2 4 8
//
// Every rank runs every test case in the same order; checks use CHECK (not
// REQUIRE) so a failing rank keeps calling the same collectives as the others
// instead of leaving them blocked.

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <strata/comm/mpi.hpp>
#include <strata/comm/self.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iterator>
#include <string>
#include <unistd.h>
#include <vector>

using namespace strata::comm;

namespace {

mpi_environment* g_env = nullptr;
mpi_communicator& world() { return g_env->world(); }

// Shows the rank in every failure message of the enclosing test case.
#define RANK_INFO INFO("world rank ", world().rank(), " of ", world().size())

constexpr reduce_op all_ops[] = {reduce_op::sum, reduce_op::max, reduce_op::min};

// Closed form of a reduction over ranks r = 0..P-1 of (r + 1 + x).
double expected_reduce(reduce_op op, int P, double x) {
  switch (op) {
    case reduce_op::sum: return P * (P + 1) / 2.0 + P * x;
    case reduce_op::max: return P + x;
    case reduce_op::min: return 1 + x;
  }
  return 0;
}

// True on every rank iff it is true on every rank (for checks whose result
// must be identical everywhere).
bool all_ranks(bool b) {
  std::int32_t v = b ? 1 : 0;
  world().all_reduce(&v, 1, reduce_op::min);
  return v == 1;
}

template <class F>
std::string thrown_message(F&& f) {
  try {
    f();
  } catch (const comm_error& e) {
    return e.what();
  }
  return {};
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// (data, pipeline, tensor) sizes of the mesh used for a world of P ranks.
struct mesh {
  int dp, pp, tp;
};
mesh mesh_for(int P) {
  switch (P) {
    case 8: return {2, 2, 2};
    case 4: return {1, 2, 2};
    case 2: return {1, 1, 2};
    default: return {P, 1, 1};
  }
}

}  // namespace

TEST_CASE("world communicator") {
  RANK_INFO;
  int r = -1, s = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  CHECK(world().rank() == r);
  CHECK(world().size() == s);
  CHECK(g_env->rank() == r);
  CHECK(g_env->size() == s);
  CHECK(world().name() == "world");
  CHECK(world().native() != MPI_COMM_WORLD);  // a private duplicate
  CHECK(g_env->thread_level() >= MPI_THREAD_FUNNELED);
  world().barrier();
  world().synchronize();
}

TEST_CASE_TEMPLATE("all_reduce sum/max/min", T, float, double, std::int32_t, std::int64_t) {
  RANK_INFO;
  auto& c = world();
  const int P = c.size(), r = c.rank();
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{1001}}) {
    for (reduce_op op : all_ops) {
      std::vector<T> buf(n);
      for (std::size_t i = 0; i < n; ++i) buf[i] = static_cast<T>(r + 1 + static_cast<int>(i));
      c.all_reduce(buf.data(), n, op);
      std::size_t bad = 0;
      for (std::size_t i = 0; i < n; ++i)
        bad += buf[i] != static_cast<T>(expected_reduce(op, P, static_cast<double>(i)));
      CHECK(bad == 0);
    }
  }
}

TEST_CASE_TEMPLATE("reduce_scatter", T, float, double, std::int32_t, std::int64_t) {
  RANK_INFO;
  auto& c = world();
  const int P = c.size(), r = c.rank();
  const std::size_t n = 257, total = n * static_cast<std::size_t>(P);
  // Element k of rank r's input is (r+1)*(k+1), so the sum at k is
  // P(P+1)/2*(k+1), the max P*(k+1), the min (k+1).
  auto fill = [&](T* p) {
    for (std::size_t k = 0; k < total; ++k) p[k] = static_cast<T>((r + 1) * static_cast<int>(k + 1));
  };
  auto expect = [&](reduce_op op, std::size_t k) -> T {
    const auto K = static_cast<std::int64_t>(k + 1);
    switch (op) {
      case reduce_op::sum: return static_cast<T>(P * (P + 1) / 2 * K);
      case reduce_op::max: return static_cast<T>(P * K);
      case reduce_op::min: return static_cast<T>(K);
    }
    return T{};
  };
  const std::size_t base = static_cast<std::size_t>(r) * n;
  for (reduce_op op : all_ops) {
    std::vector<T> send(total), recv(n, T(-1));
    fill(send.data());
    c.reduce_scatter(send.data(), recv.data(), n, op);
    std::size_t bad = 0;
    for (std::size_t j = 0; j < n; ++j) bad += recv[j] != expect(op, base + j);
    CHECK(bad == 0);

    // In place, MPI form: result lands in the first block.
    fill(send.data());
    c.reduce_scatter(send.data(), send.data(), n, op);
    bad = 0;
    for (std::size_t j = 0; j < n; ++j) bad += send[j] != expect(op, base + j);
    CHECK(bad == 0);

    // In place, NCCL form: result lands in the caller's own block.
    fill(send.data());
    c.reduce_scatter(send.data(), send.data() + base, n, op);
    bad = 0;
    for (std::size_t j = 0; j < n; ++j) bad += send[base + j] != expect(op, base + j);
    CHECK(bad == 0);
  }
}

TEST_CASE_TEMPLATE("all_gather", T, float, double, std::int32_t, std::int64_t) {
  RANK_INFO;
  auto& c = world();
  const int P = c.size(), r = c.rank();
  const std::size_t n = 100;
  std::vector<T> send(n), recv(n * static_cast<std::size_t>(P), T(-1));
  for (std::size_t i = 0; i < n; ++i) send[i] = static_cast<T>(r * 1000 + static_cast<int>(i));
  c.all_gather(send.data(), recv.data(), n);
  std::size_t bad = 0;
  for (int b = 0; b < P; ++b)
    for (std::size_t i = 0; i < n; ++i)
      bad += recv[static_cast<std::size_t>(b) * n + i] != static_cast<T>(b * 1000 + static_cast<int>(i));
  CHECK(bad == 0);

  // In place: own block already in recv.
  std::vector<T> inplace(n * static_cast<std::size_t>(P), T(-1));
  T* mine = inplace.data() + static_cast<std::size_t>(r) * n;
  std::copy(send.begin(), send.end(), mine);
  c.all_gather(mine, inplace.data(), n);
  CHECK(inplace == recv);
}

TEST_CASE_TEMPLATE("broadcast from every root", T, float, double, std::int32_t, std::int64_t) {
  RANK_INFO;
  auto& c = world();
  const int P = c.size(), r = c.rank();
  const std::size_t n = 333;
  for (int root = 0; root < P; ++root) {
    std::vector<T> buf(n, T(-1));
    if (r == root)
      for (std::size_t i = 0; i < n; ++i) buf[i] = static_cast<T>(root * 10 + static_cast<int>(i));
    c.broadcast(buf.data(), n, root);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) bad += buf[i] != static_cast<T>(root * 10 + static_cast<int>(i));
    CHECK(bad == 0);
  }
}

TEST_CASE_TEMPLATE("all_to_all", T, float, double, std::int32_t, std::int64_t) {
  RANK_INFO;
  auto& c = world();
  const int P = c.size(), r = c.rank();
  const std::size_t n = 7, total = n * static_cast<std::size_t>(P);
  // Block p of rank r's input is addressed to rank p: value r*1000 + p*10 + i.
  std::vector<T> send(total), recv(total, T(-1));
  for (int p = 0; p < P; ++p)
    for (std::size_t i = 0; i < n; ++i)
      send[static_cast<std::size_t>(p) * n + i] = static_cast<T>(r * 1000 + p * 10 + static_cast<int>(i));
  auto check_recv = [&](const std::vector<T>& got) {
    std::size_t bad = 0;
    for (int p = 0; p < P; ++p)
      for (std::size_t i = 0; i < n; ++i)
        bad += got[static_cast<std::size_t>(p) * n + i] !=
               static_cast<T>(p * 1000 + r * 10 + static_cast<int>(i));
    return bad;
  };
  c.all_to_all(send.data(), recv.data(), n);
  CHECK(check_recv(recv) == 0);
  c.all_to_all(send.data(), send.data(), n);  // in place
  CHECK(check_recv(send) == 0);
}

TEST_CASE("send/recv with tags between rank pairs") {
  RANK_INFO;
  auto& c = world();
  const int P = c.size(), r = c.rank();
  const int partner = (r % 2 == 0) ? r + 1 : r - 1;
  if (partner >= P) return;  // odd one out (and the 1-rank world)
  // Large enough for the rendezvous protocol, so the pairing is really tested.
  const std::size_t n = 1 << 15;
  std::vector<double> a(n), b(n);
  std::vector<std::int64_t> idx(5);
  if (r % 2 == 0) {
    for (std::size_t i = 0; i < n; ++i) a[i] = r + 0.5 * static_cast<double>(i);
    for (std::size_t i = 0; i < 5; ++i) idx[i] = r * 100 + static_cast<std::int64_t>(i);
    c.send(a.data(), n, partner, 5);
    c.send(idx.data(), idx.size(), partner, 9);
    c.recv(b.data(), n, partner, 11);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) bad += b[i] != -(partner + 0.5 * static_cast<double>(i));
    CHECK(bad == 0);
  } else {
    c.recv(a.data(), n, partner, 5);
    c.recv(idx.data(), idx.size(), partner, 9);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) bad += a[i] != partner + 0.5 * static_cast<double>(i);
    CHECK(bad == 0);
    for (std::size_t i = 0; i < 5; ++i) CHECK(idx[i] == partner * 100 + static_cast<std::int64_t>(i));
    for (std::size_t i = 0; i < n; ++i) b[i] = -(r + 0.5 * static_cast<double>(i));
    c.send(b.data(), n, partner, 11);
  }
}

TEST_CASE("group matches by tag, not posting order") {
  RANK_INFO;
  auto& c = world();
  const int P = c.size(), r = c.rank();
  const int partner = (r % 2 == 0) ? r + 1 : r - 1;
  if (partner >= P) return;
  std::vector<float> x(64, static_cast<float>(r)), y(64, -1);
  std::vector<std::int32_t> u(3, r * 10), v(3, -1);
  // Even ranks post (float tag 1, int tag 2); odd ranks post the receives in
  // the opposite order. Tags must route each message to the right buffer.
  if (r % 2 == 0) {
    c.group({send_op(x.data(), x.size(), partner, 1), send_op(u.data(), u.size(), partner, 2),
             recv_op(v.data(), v.size(), partner, 4), recv_op(y.data(), y.size(), partner, 3)});
  } else {
    c.group({recv_op(v.data(), v.size(), partner, 2), recv_op(y.data(), y.size(), partner, 1),
             send_op(x.data(), x.size(), partner, 3), send_op(u.data(), u.size(), partner, 4)});
  }
  CHECK(y == std::vector<float>(64, static_cast<float>(partner)));
  CHECK(v == std::vector<std::int32_t>(3, partner * 10));
}

TEST_CASE("sendrecv ring shift") {
  RANK_INFO;
  auto& c = world();
  const int P = c.size(), r = c.rank();
  const int next = (r + 1) % P, prev = (r + P - 1) % P;
  const std::size_t n = 1 << 16;
  std::vector<std::int64_t> out(n), in(n, -1);
  for (std::size_t i = 0; i < n; ++i) out[i] = r * 1'000'000 + static_cast<std::int64_t>(i);
  c.sendrecv(out.data(), n, next, in.data(), n, prev, 7);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) bad += in[i] != prev * 1'000'000 + static_cast<std::int64_t>(i);
  CHECK(bad == 0);
}

TEST_CASE("grouped bidirectional ring exchange does not deadlock") {
  RANK_INFO;
  auto& c = world();
  const int P = c.size(), r = c.rank();
  const int next = (r + 1) % P, prev = (r + P - 1) % P;
  // Every rank sends to both neighbours before receiving; with blocking sends
  // of rendezvous-sized messages this is the classic deadlock.
  const std::size_t n = 1 << 16;
  std::vector<float> fwd(n, static_cast<float>(r)), bwd(n, static_cast<float>(-r));
  std::vector<float> from_prev(n, 0.5f), from_next(n, 0.5f);
  std::vector<std::int64_t> meta{r, r * r}, meta_in(2, -1);
  const p2p_op ops[] = {
      send_op(fwd.data(), n, next, 1),       send_op(meta.data(), 2, next, 2),
      send_op(bwd.data(), n, prev, 3),       recv_op(from_prev.data(), n, prev, 1),
      recv_op(meta_in.data(), 2, prev, 2),   recv_op(from_next.data(), n, next, 3),
  };
  c.group(ops);
  CHECK(from_prev == std::vector<float>(n, static_cast<float>(prev)));
  CHECK(from_next == std::vector<float>(n, static_cast<float>(-next)));
  CHECK(meta_in == std::vector<std::int64_t>{prev, static_cast<std::int64_t>(prev) * prev});
}

TEST_CASE("pipeline exchange with no_peer at the ends") {
  RANK_INFO;
  auto& c = world();
  const int P = c.size(), r = c.rank();
  const int prev = r > 0 ? r - 1 : no_peer, next = r + 1 < P ? r + 1 : no_peer;
  const std::size_t n = 1 << 14;
  // Activations flow forward, gradients backward, in one group per step.
  std::vector<double> act(n, r + 1.0), act_in(n, -7.0), grad(n, -(r + 1.0)), grad_in(n, -7.0);
  c.group({send_op(act.data(), n, next, 0), recv_op(act_in.data(), n, prev, 0),
           send_op(grad.data(), n, prev, 1), recv_op(grad_in.data(), n, next, 1)});
  CHECK(act_in == std::vector<double>(n, prev == no_peer ? -7.0 : prev + 1.0));
  CHECK(grad_in == std::vector<double>(n, next == no_peer ? -7.0 : -(next + 1.0)));

  // sendrecv accepts no_peer too.
  std::int32_t v = r, got = -5;
  c.sendrecv(&v, 1, next, &got, 1, prev, 2);
  CHECK(got == (prev == no_peer ? -5 : prev));
}

TEST_CASE("self-exchange through group") {
  RANK_INFO;
  auto& c = world();
  const int r = c.rank();
  std::vector<double> a(1 << 15, r), b(1 << 15, -1);
  c.group({recv_op(b.data(), b.size(), r, 0), send_op(a.data(), a.size(), r, 0)});
  CHECK(a == b);
}

// ---- bf16 ------------------------------------------------------------------------
// MPI has no bf16: it travels as 16-bit words and reduces through user-defined
// ops (float arithmetic, rounded back to bf16 at each combining step). Moves
// are checked bit for bit; reductions against a reference computed in double
// from the same bf16 inputs: exactly where every partial sum is representable
// in bf16, within the rounding bound otherwise.

using strata::bf16;

std::uint16_t bits_of(bf16 x) { return x.bits; }

// Rank q's bf16 input at element i for the exact reductions: +-(q+1)*k/4 with
// k in 1..7 and one sign per element. For up to 8 ranks every partial sum is
// a multiple of 1/4 of magnitude <= 36*7/4 = 63, i.e. at most 252 quarters:
// 8 significant bits, so it is a bf16 and the sum is exact in any order.
bf16 exact_input(int q, std::size_t i) {
  const int k = 1 + static_cast<int>(i % 7);
  const float sign = i % 3 == 0 ? -1.0f : 1.0f;
  return bf16(sign * static_cast<float>((q + 1) * k) * 0.25f);
}

// General values: mixed signs, magnitudes from ~0.01 to ~6, most of whose
// sums need more than bf16's 8 significant bits.
bf16 general_input(int q, std::size_t i) {
  const double x = std::sin(0.37 * static_cast<double>(i) + 1.3 * q) * (1.0 + static_cast<double>(i % 5)) +
                   0.01 * static_cast<double>(q % 3);
  return bf16(static_cast<float>(x));
}

// Reference over the given world ranks in double (exact for these inputs).
double reference(reduce_op op, const std::vector<int>& ranks, std::size_t i, bf16 (*input)(int, std::size_t)) {
  double acc = static_cast<float>(input(ranks.front(), i));
  for (std::size_t k = 1; k < ranks.size(); ++k) {
    const double v = static_cast<float>(input(ranks[k], i));
    acc = op == reduce_op::sum ? acc + v : op == reduce_op::max ? std::max(acc, v) : std::min(acc, v);
  }
  return acc;
}

// A bit pattern per (rank, element) that hits every class of bf16: normals,
// subnormals, zeros, infinities and NaNs with payloads. Moves must not touch it.
std::uint16_t pattern(int q, std::size_t i) {
  return static_cast<std::uint16_t>((static_cast<std::size_t>(q) * 7919u + i * 131u) & 0xffffu);
}

TEST_CASE("bf16 all_reduce sum/max/min: exact when every partial sum is a bf16") {
  RANK_INFO;
  auto& c = world();
  const int P = c.size(), r = c.rank();
  REQUIRE(P <= 8);  // exact_input's premise

  // On the world, then on parity groups (a tensor group's partial sums).
  mpi_communicator parity = c.split(r % 2, r, "parity");
  std::vector<int> everyone, same_parity;
  for (int q = 0; q < P; ++q) {
    everyone.push_back(q);
    if (q % 2 == r % 2) same_parity.push_back(q);
  }
  struct target {
    mpi_communicator* comm;
    const std::vector<int>* members;
  };
  for (const target& t : {target{&c, &everyone}, target{&parity, &same_parity}}) {
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{1001}, std::size_t{1} << 16}) {
      for (reduce_op op : all_ops) {
        std::vector<bf16> buf(n);
        for (std::size_t i = 0; i < n; ++i) buf[i] = exact_input(r, i);
        t.comm->all_reduce(buf.data(), n, op);  // always in place (MPI_IN_PLACE)
        std::size_t bad = 0, not_exact = 0;
        for (std::size_t i = 0; i < n; ++i) {
          const double want = reference(op, *t.members, i, exact_input);
          const bf16 want16(static_cast<float>(want));
          not_exact += static_cast<double>(static_cast<float>(want16)) != want;
          bad += bits_of(buf[i]) != bits_of(want16);
        }
        CHECK(not_exact == 0);  // the premise: the reference itself is a bf16
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("bf16 all_reduce sum of general values: within the bf16 rounding bound") {
  RANK_INFO;
  auto& c = world();
  const int P = c.size(), r = c.rank();
  std::vector<int> everyone;
  for (int q = 0; q < P; ++q) everyone.push_back(q);
  // Each combining step rounds its float sum to bf16 once (unit roundoff
  // u = 2^-8), and any summation order of P terms has at most P-1 steps on a
  // path: |got - exact| <= gamma(P-1) * sum|x|, gamma(k) = k*u / (1 - k*u)
  // (Higham, Accuracy and Stability of Numerical Algorithms, 4.2). P = 1: exact.
  const double u = std::ldexp(1.0, -8);
  const double gamma = (P - 1) * u / (1.0 - (P - 1) * u);
  for (std::size_t n : {std::size_t{1001}, std::size_t{1} << 16}) {
    std::vector<bf16> buf(n);
    for (std::size_t i = 0; i < n; ++i) buf[i] = general_input(r, i);
    c.all_reduce(buf.data(), n, reduce_op::sum);
    std::size_t bad = 0, inexact = 0;
    double worst = 0;  // largest error in units of the bound's sum|x|
    for (std::size_t i = 0; i < n; ++i) {
      const double exact = reference(reduce_op::sum, everyone, i, general_input);
      double magnitude = 0;
      for (int q = 0; q < P; ++q) magnitude += std::fabs(static_cast<float>(general_input(q, i)));
      const double err = std::fabs(static_cast<double>(static_cast<float>(buf[i])) - exact);
      bad += err > gamma * magnitude;
      inexact += err > 0;
      if (magnitude > 0) worst = std::max(worst, err / magnitude);
    }
    CHECK(bad == 0);
    if (P == 1) CHECK(inexact == 0);
    if (P > 1) CHECK(inexact > 0);  // the inputs do exercise rounding
    if (r == 0 && n == 1001) MESSAGE("bf16 sum over ", P, " ranks: worst |error| / sum|x| = ", worst,
                                     " (bound ", gamma, ")");
  }
}

TEST_CASE("bf16 all_reduce sum rounds each float sum to nearest, ties to even") {
  RANK_INFO;
  auto& c = world();
  const int P = c.size(), r = c.rank();
  // Only ranks 0 and 1 contribute; the others add zeros, which is exact. So
  // the result is one float addition of the two inputs rounded to bf16,
  // whatever the reduction order: checked bit for bit.
  const std::size_t n = 4096;
  std::vector<bf16> a(n), b(n);
  // Explicit ties first: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 (-> 1,
  // even); (1 + 2^-7) + 2^-8 halfway between 1 + 2^-7 and 1 + 2^-6 (-> the
  // latter, even); 1 + 3*2^-9 is above halfway (-> 1 + 2^-7).
  const float ties[][3] = {{1.0f, 0x1p-8f, 1.0f},
                           {1.0f + 0x1p-7f, 0x1p-8f, 1.0f + 0x1p-6f},
                           {1.0f, 0x3p-9f, 1.0f + 0x1p-7f},
                           {-256.0f, -1.0f, -256.0f},
                           {258.0f, 1.0f, 260.0f}};
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = general_input(0, i);
    b[i] = general_input(1, i);
  }
  for (std::size_t t = 0; t < std::size(ties); ++t) {
    a[t] = bf16(ties[t][0]);
    b[t] = bf16(ties[t][1]);
  }
  std::vector<bf16> buf(n, bf16(0.0f));
  if (r == 0) buf = a;
  if (r == 1) buf = b;
  c.all_reduce(buf.data(), n, reduce_op::sum);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const bf16 want = P == 1 ? a[i] : bf16(static_cast<float>(a[i]) + static_cast<float>(b[i]));
    bad += bits_of(buf[i]) != bits_of(want);
  }
  CHECK(bad == 0);
  if (P >= 2)
    for (std::size_t t = 0; t < std::size(ties); ++t) CHECK(static_cast<float>(buf[t]) == ties[t][2]);
}

TEST_CASE("bf16 reduce_scatter sum/max/min") {
  RANK_INFO;
  auto& c = world();
  const int P = c.size(), r = c.rank();
  REQUIRE(P <= 8);
  const std::size_t n = 257, total = n * static_cast<std::size_t>(P);
  // Element k of rank r's input is (r+1)*(1 + k%7): integers, the largest sum
  // 36*7 = 252 < 256, so every partial sum is a bf16 and the results are exact.
  auto fill = [&](bf16* p) {
    for (std::size_t k = 0; k < total; ++k) p[k] = bf16(static_cast<float>((r + 1) * (1 + static_cast<int>(k % 7))));
  };
  auto expect = [&](reduce_op op, std::size_t k) -> std::uint16_t {
    const int K = 1 + static_cast<int>(k % 7);
    const int v = op == reduce_op::sum ? P * (P + 1) / 2 * K : op == reduce_op::max ? P * K : K;
    return bf16(static_cast<float>(v)).bits;
  };
  const std::size_t base = static_cast<std::size_t>(r) * n;
  for (reduce_op op : all_ops) {
    std::vector<bf16> send(total), recv(n, bf16(-1.0f));
    fill(send.data());
    c.reduce_scatter(send.data(), recv.data(), n, op);
    std::size_t bad = 0;
    for (std::size_t j = 0; j < n; ++j) bad += bits_of(recv[j]) != expect(op, base + j);
    CHECK(bad == 0);

    // In place, MPI form: result lands in the first block.
    fill(send.data());
    c.reduce_scatter(send.data(), send.data(), n, op);
    bad = 0;
    for (std::size_t j = 0; j < n; ++j) bad += bits_of(send[j]) != expect(op, base + j);
    CHECK(bad == 0);

    // In place, NCCL form: result lands in the caller's own block.
    fill(send.data());
    c.reduce_scatter(send.data(), send.data() + base, n, op);
    bad = 0;
    for (std::size_t j = 0; j < n; ++j) bad += bits_of(send[base + j]) != expect(op, base + j);
    CHECK(bad == 0);
  }
}

TEST_CASE("bf16 all_gather moves every bit pattern unchanged") {
  RANK_INFO;
  auto& c = world();
  const int P = c.size(), r = c.rank();
  const std::size_t n = 1000;
  std::vector<bf16> send(n), recv(n * static_cast<std::size_t>(P), bf16::from_bits(0xdead));
  for (std::size_t i = 0; i < n; ++i) send[i] = bf16::from_bits(pattern(r, i));
  c.all_gather(send.data(), recv.data(), n);
  std::size_t bad = 0;
  for (int b = 0; b < P; ++b)
    for (std::size_t i = 0; i < n; ++i) bad += bits_of(recv[static_cast<std::size_t>(b) * n + i]) != pattern(b, i);
  CHECK(bad == 0);

  // In place: own block already in recv.
  std::vector<bf16> inplace(n * static_cast<std::size_t>(P), bf16::from_bits(0xdead));
  std::copy(send.begin(), send.end(), inplace.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r) * n));
  c.all_gather(inplace.data() + static_cast<std::size_t>(r) * n, inplace.data(), n);
  bad = 0;
  for (std::size_t k = 0; k < inplace.size(); ++k) bad += bits_of(inplace[k]) != bits_of(recv[k]);
  CHECK(bad == 0);
}

TEST_CASE("bf16 broadcast from every root") {
  RANK_INFO;
  auto& c = world();
  const int P = c.size(), r = c.rank();
  const std::size_t n = 333;
  for (int root = 0; root < P; ++root) {
    std::vector<bf16> buf(n, bf16::from_bits(0xdead));
    if (r == root)
      for (std::size_t i = 0; i < n; ++i) buf[i] = bf16::from_bits(pattern(root, i));
    c.broadcast(buf.data(), n, root);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) bad += bits_of(buf[i]) != pattern(root, i);
    CHECK(bad == 0);
  }
}

TEST_CASE("bf16 send/recv and sendrecv ring shift") {
  RANK_INFO;
  auto& c = world();
  const int P = c.size(), r = c.rank();
  // Large enough for the rendezvous protocol.
  const std::size_t n = 1 << 16;
  const int partner = (r % 2 == 0) ? r + 1 : r - 1;
  if (partner < P) {
    std::vector<bf16> a(n), b(n, bf16::from_bits(0));
    for (std::size_t i = 0; i < n; ++i) a[i] = bf16::from_bits(pattern(r, i));
    if (r % 2 == 0) {
      c.send(a.data(), n, partner, 21);
      c.recv(b.data(), n, partner, 22);
    } else {
      c.recv(b.data(), n, partner, 21);
      c.send(a.data(), n, partner, 22);
    }
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) bad += bits_of(b[i]) != pattern(partner, i);
    CHECK(bad == 0);
  }

  const int next = (r + 1) % P, prev = (r + P - 1) % P;
  std::vector<bf16> out(n), in(n, bf16::from_bits(0));
  for (std::size_t i = 0; i < n; ++i) out[i] = bf16::from_bits(pattern(r, i));
  c.sendrecv(out.data(), n, next, in.data(), n, prev, 7);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) bad += bits_of(in[i]) != pattern(prev, i);
  CHECK(bad == 0);

  // Exact-size receives count bf16 elements (not bytes).
  if (P >= 2 && r <= 1) {
    bf16 buf[4] = {bf16(1.0f), bf16(2.0f), bf16(3.0f), bf16(4.0f)};
    if (r == 0) {
      c.send(buf, 3, 1, 23);
    } else {
      const std::string e = thrown_message([&] { c.recv(buf, 4, 0, 23); });
      CHECK(contains(e, "received 3 elements, expected 4"));
    }
  }
}

TEST_CASE("grouped p2p mixes bf16 activations with float gradients") {
  RANK_INFO;
  auto& c = world();
  const int P = c.size(), r = c.rank();
  // Pipeline step: bf16 activations (plus a bf16 residual on its own tag) go
  // forward, float gradients and int64 metadata backward, in one group;
  // no_peer at the ends. Receives are posted in another order than sends.
  const int prev = r > 0 ? r - 1 : no_peer, next = r + 1 < P ? r + 1 : no_peer;
  const std::size_t n = 1 << 15, m = 100;
  std::vector<bf16> act(n), act_in(n, bf16::from_bits(0x7fc1)), res(m), res_in(m, bf16::from_bits(0x7fc1));
  for (std::size_t i = 0; i < n; ++i) act[i] = bf16::from_bits(pattern(r, i));
  for (std::size_t i = 0; i < m; ++i) res[i] = bf16(0.5f * static_cast<float>(r) + static_cast<float>(i));
  std::vector<float> grad(n, -(r + 0.5f)), grad_in(n, 7.0f);
  std::vector<std::int64_t> meta{r, 10 * r}, meta_in(2, -1);
  c.group({recv_op(res_in.data(), m, prev, 2), send_op(act.data(), n, next, 1),
           recv_op(grad_in.data(), n, next, 3), send_op(res.data(), m, next, 2),
           recv_op(act_in.data(), n, prev, 1), send_op(grad.data(), n, prev, 3),
           send_op(meta.data(), 2, prev, 4), recv_op(meta_in.data(), 2, next, 4)});
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i)
    bad += bits_of(act_in[i]) != (prev == no_peer ? std::uint16_t{0x7fc1} : pattern(prev, i));
  for (std::size_t i = 0; i < m; ++i)
    bad += bits_of(res_in[i]) !=
           (prev == no_peer ? std::uint16_t{0x7fc1} : bf16(0.5f * static_cast<float>(prev) + static_cast<float>(i)).bits);
  CHECK(bad == 0);
  CHECK(grad_in == std::vector<float>(n, next == no_peer ? 7.0f : -(next + 0.5f)));
  CHECK(meta_in == (next == no_peer ? std::vector<std::int64_t>{-1, -1} : std::vector<std::int64_t>{next, 10 * next}));

  // Bidirectional ring (every rank both sends and receives, also to itself at P = 1).
  const int rn = (r + 1) % P, rp = (r + P - 1) % P;
  std::vector<bf16> fwd_in(n, bf16::from_bits(0)), bwd(n), bwd_in(n, bf16::from_bits(0));
  for (std::size_t i = 0; i < n; ++i) bwd[i] = bf16(-static_cast<float>(r) - 0.25f);
  std::vector<float> f32(m, static_cast<float>(r) + 0.125f), f32_in(m, 0.0f);
  const p2p_op ring[] = {send_op(act.data(), n, rn, 5),      send_op(bwd.data(), n, rp, 6),
                         send_op(f32.data(), m, rn, 7),      recv_op(f32_in.data(), m, rp, 7),
                         recv_op(bwd_in.data(), n, rn, 6),   recv_op(fwd_in.data(), n, rp, 5)};
  c.group(ring);
  bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    bad += bits_of(fwd_in[i]) != pattern(rp, i);
    bad += bits_of(bwd_in[i]) != bf16(-static_cast<float>(rn) - 0.25f).bits;
  }
  CHECK(bad == 0);
  CHECK(f32_in == std::vector<float>(m, static_cast<float>(rp) + 0.125f));
}

TEST_CASE("bf16 errors name the call, communicator and rank") {
  RANK_INFO;
  auto& c = world();
  const int P = c.size(), r = c.rank();
  const std::string null_err =
      thrown_message([&] { c.all_reduce(static_cast<bf16*>(nullptr), 3, reduce_op::sum); });
  CHECK(contains(null_err, "MPI_Allreduce"));
  CHECK(contains(null_err, "'world'"));
  CHECK(contains(null_err, "rank " + std::to_string(r) + " of " + std::to_string(P)));
  CHECK(contains(null_err, "null buffer"));

  bf16 x(1.0f);
  const std::string big_err = thrown_message(
      [&] { c.reduce_scatter(&x, &x, static_cast<std::size_t>(INT_MAX) + 1, reduce_op::max); });
  CHECK(contains(big_err, "MPI_Reduce_scatter_block"));
  CHECK(contains(big_err, "INT_MAX"));

  const std::string send_err = thrown_message([&] { c.send(&x, 1, P, 0); });
  CHECK(contains(send_err, "MPI_Send"));
  CHECK(contains(send_err, "peer " + std::to_string(P)));

  // Still usable, and the user ops are in place for the rest of the run.
  CHECK(detail::bf16_mpi_ops_live());
  bf16 one(1.0f);
  c.all_reduce(&one, 1, reduce_op::sum);
  CHECK(static_cast<float>(one) == static_cast<float>(P));
}

TEST_CASE("self_communicator handles bf16") {
  self_communicator s;
  std::vector<bf16> a(5), b(5, bf16::from_bits(0));
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = bf16::from_bits(pattern(0, i));
  auto same = [](const std::vector<bf16>& x, const std::vector<bf16>& y) {
    return std::equal(x.begin(), x.end(), y.begin(), y.end(),
                      [](bf16 p, bf16 q) { return p.bits == q.bits; });
  };
  std::vector<bf16> v = a;
  for (reduce_op op : all_ops) {
    s.all_reduce(v.data(), v.size(), op);
    CHECK(same(v, a));
  }
  s.reduce_scatter(a.data(), b.data(), a.size(), reduce_op::sum);
  CHECK(same(b, a));
  b.assign(5, bf16::from_bits(0));
  s.all_gather(a.data(), b.data(), a.size());
  CHECK(same(b, a));
  s.broadcast(v.data(), v.size(), 0);
  CHECK(same(v, a));
  b.assign(5, bf16::from_bits(0));
  s.sendrecv(a.data(), a.size(), 0, b.data(), b.size(), 0, 3);
  CHECK(same(b, a));
  b.assign(5, bf16::from_bits(0));
  std::vector<float> f(3, 2.5f), g(3, 0.0f);
  s.group({send_op(a.data(), a.size(), 0, 1), send_op(f.data(), f.size(), 0, 2),
           recv_op(g.data(), g.size(), 0, 2), recv_op(b.data(), b.size(), 0, 1)});
  CHECK(same(b, a));
  CHECK(g == f);
  // The mailbox tells bf16 from a float of the same byte count.
  std::vector<float> wrong(a.size() / 2);
  s.send(a.data(), 4, 0, 9);
  CHECK(contains(thrown_message([&] { s.recv(wrong.data(), 2, 0, 9); }), "another type/size"));
  CHECK(s.pending_messages() == 1);
}

TEST_CASE("2x2x2 mesh: split into data, pipeline and tensor groups") {
  RANK_INFO;
  auto& c = world();
  const int P = c.size(), r = c.rank();
  const mesh m = mesh_for(P);
  REQUIRE(m.dp * m.pp * m.tp == P);
  // rank = d*(pp*tp) + p*tp + t
  const int d = r / (m.pp * m.tp), p = (r / m.tp) % m.pp, t = r % m.tp;

  mpi_communicator tensor = c.split(d * m.pp + p, t, "tensor");
  mpi_communicator data = c.split(p * m.tp + t, d, "data");
  mpi_communicator pipe = c.split(d * m.tp + t, p, "pipeline");
  CHECK(tensor.size() == m.tp);
  CHECK(tensor.rank() == t);
  CHECK(data.size() == m.dp);
  CHECK(data.rank() == d);
  CHECK(pipe.size() == m.pp);
  CHECK(pipe.rank() == p);
  CHECK(tensor.name() == "tensor");

  // Sums of world ranks over each group, in closed form.
  const std::int64_t tensor_base = d * m.pp * m.tp + p * m.tp;
  const std::int64_t tensor_sum = m.tp * tensor_base + m.tp * (m.tp - 1) / 2;
  const std::int64_t data_sum =
      m.dp * static_cast<std::int64_t>(p * m.tp + t) + m.pp * m.tp * m.dp * (m.dp - 1) / 2;
  const std::int64_t pipe_sum =
      m.pp * static_cast<std::int64_t>(d * m.pp * m.tp + t) + m.tp * m.pp * (m.pp - 1) / 2;

  const std::size_t n = 50;
  auto group_sum_ok = [&](mpi_communicator& g, std::int64_t expected_rank_sum) {
    std::vector<double> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = r + static_cast<double>(i);
    g.all_reduce(v.data(), n, reduce_op::sum);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i)
      bad += v[i] != static_cast<double>(expected_rank_sum) + static_cast<double>(g.size()) * static_cast<double>(i);
    return bad == 0;
  };
  CHECK(group_sum_ok(tensor, tensor_sum));
  CHECK(group_sum_ok(data, data_sum));
  CHECK(group_sum_ok(pipe, pipe_sum));

  // The same groups from explicit rank lists.
  std::vector<int> tensor_members, data_members;
  for (int tt = 0; tt < m.tp; ++tt) tensor_members.push_back(d * m.pp * m.tp + p * m.tp + tt);
  for (int dd = 0; dd < m.dp; ++dd) data_members.push_back(dd * m.pp * m.tp + p * m.tp + t);
  mpi_communicator tensor2 = c.group_of(tensor_members, "tensor");
  mpi_communicator data2 = c.group_of(data_members, "data");
  CHECK(tensor2.size() == m.tp);
  CHECK(tensor2.rank() == t);
  CHECK(data2.size() == m.dp);
  CHECK(data2.rank() == d);
  CHECK(group_sum_ok(tensor2, tensor_sum));
  CHECK(group_sum_ok(data2, data_sum));

  // Full partition form (what a plan computes): all pipeline groups.
  std::vector<std::vector<int>> pipe_groups;
  for (int dd = 0; dd < m.dp; ++dd)
    for (int tt = 0; tt < m.tp; ++tt) {
      std::vector<int> g;
      for (int pp = 0; pp < m.pp; ++pp) g.push_back(dd * m.pp * m.tp + pp * m.tp + tt);
      pipe_groups.push_back(g);
    }
  mpi_communicator pipe2 = group_from_partition(c, std::span<const std::vector<int>>(pipe_groups));
  CHECK(pipe2.size() == m.pp);
  CHECK(pipe2.rank() == p);
  CHECK(group_sum_ok(pipe2, pipe_sum));

  // List order defines sub-rank order; nested split of a sub-communicator.
  std::vector<int> reversed(tensor_members.rbegin(), tensor_members.rend());
  mpi_communicator tensor_rev = c.group_of(reversed);
  CHECK(tensor_rev.rank() == m.tp - 1 - t);
  mpi_communicator tensor_rev2 = tensor.split(0, -t);
  CHECK(tensor_rev2.rank() == m.tp - 1 - t);
  std::int32_t who = tensor_rev2.rank() == 0 ? r : -1;
  tensor_rev2.broadcast(&who, 1, 0);
  CHECK(who == tensor_members.back());

  // Errors on a sub-communicator name it.
  const std::string e = thrown_message([&] {
    float x = 0;
    tensor.broadcast(&x, 1, tensor.size());
  });
  CHECK(contains(e, "'tensor'"));
  CHECK(contains(e, "MPI_Bcast"));

  // Moving keeps the communicator usable; the moved-from one owns nothing.
  mpi_communicator moved = std::move(data2);
  CHECK(data2.native() == MPI_COMM_NULL);
  CHECK(group_sum_ok(moved, data_sum));
}

TEST_CASE("MPI errors become comm_error naming the call, communicator and rank") {
  RANK_INFO;
  auto& c = world();
  const int P = c.size(), r = c.rank();
  float x = 1;

  const std::string send_err = thrown_message([&] { c.send(&x, 1, P, 0); });
  CHECK(contains(send_err, "MPI_Send"));
  CHECK(contains(send_err, "'world'"));
  CHECK(contains(send_err, "rank " + std::to_string(r) + " of " + std::to_string(P)));
  CHECK(contains(send_err, "peer " + std::to_string(P)));
  if (r == 0) MESSAGE(send_err);

  const std::string bcast_err = thrown_message([&] { c.broadcast(&x, 1, P); });
  CHECK(contains(bcast_err, "MPI_Bcast"));
  CHECK(contains(bcast_err, "rank " + std::to_string(r)));

  const std::string group_err =
      thrown_message([&] { c.group({send_op(&x, 1, P, 0)}); });
  CHECK(contains(group_err, "MPI_Isend"));

  const std::string big_err = thrown_message(
      [&] { c.all_reduce(&x, static_cast<std::size_t>(INT_MAX) + 1, reduce_op::sum); });
  CHECK(contains(big_err, "MPI_Allreduce"));
  CHECK(contains(big_err, "INT_MAX"));

  const std::string null_err =
      thrown_message([&] { c.all_reduce(static_cast<float*>(nullptr), 3, reduce_op::sum); });
  CHECK(contains(null_err, "null buffer"));

  // The communicator stays usable after a rejected call.
  std::int32_t one = 1;
  c.all_reduce(&one, 1, reduce_op::sum);
  CHECK(one == P);
}

TEST_CASE("recv of a shorter message than expected is an error") {
  RANK_INFO;
  auto& c = world();
  const int P = c.size(), r = c.rank();
  if (P < 2 || r > 1) return;
  std::int32_t buf[4] = {1, 2, 3, 4};
  if (r == 0) {
    c.send(buf, 3, 1, 0);
  } else {
    const std::string e = thrown_message([&] { c.recv(buf, 4, 0, 0); });
    CHECK(contains(e, "received 3 elements, expected 4"));
  }
}

TEST_CASE("agree: every rank throws the failing rank's message") {
  RANK_INFO;
  auto& c = world();
  const int P = c.size(), r = c.rank();
  CHECK_NOTHROW(c.agree(true, "unused"));

  const int bad = P - 1;
  const std::string e = thrown_message(
      [&] { c.agree(r != bad, "batch size 7 on rank " + std::to_string(r) + " is not divisible by 2"); });
  CHECK(contains(e, "check failed on rank " + std::to_string(bad)));
  CHECK(contains(e, "batch size 7 on rank " + std::to_string(bad)));
  // Identical text everywhere: compare a hash across ranks.
  const auto h = static_cast<std::int64_t>(std::hash<std::string>{}(e) >> 1);
  std::int64_t lo = h, hi = h;
  c.all_reduce(&lo, 1, reduce_op::min);
  c.all_reduce(&hi, 1, reduce_op::max);
  CHECK(lo == hi);
}

TEST_CASE("bad split/group_of arguments fail on every rank instead of hanging") {
  RANK_INFO;
  auto& c = world();
  const int P = c.size(), r = c.rank();

  CHECK_THROWS_AS(c.split(r == 0 ? -1 : 0, 0), comm_error);

  // Rank 0 leaves itself out of its list.
  std::vector<int> mine = r == 0 ? std::vector<int>{} : std::vector<int>{r};
  const std::string e1 = thrown_message([&] { (void)c.group_of(mine); });
  CHECK(contains(e1, "is not in"));

  // Ranks 0 and 1 pass different lists for the same group.
  if (P >= 2) {
    std::vector<int> l = r == 0 ? std::vector<int>{0, 1} : r == 1 ? std::vector<int>{1, 0}
                                                                  : std::vector<int>{r};
    const std::string e2 = thrown_message([&] { (void)c.group_of(l); });
    CHECK(contains(e2, "every member must pass the same list"));
  }
  CHECK(all_ranks(true));
}

namespace {
char g_timeout_msg[96];
extern "C" void on_timeout(int) {
  // Only async-signal-safe calls here.
  const ssize_t ignored = write(2, g_timeout_msg, strlen(g_timeout_msg));
  (void)ignored;
  _exit(124);
}
}  // namespace

int main(int argc, char** argv) {
  int worst = 0;
  bool bf16_ops_made = false;
  {
    mpi_environment env(&argc, &argv);
    g_env = &env;
    // A divergent failure can leave ranks waiting on each other forever; a dead
    // rank makes mpiexec tear the job down instead.
    std::snprintf(g_timeout_msg, sizeof g_timeout_msg,
                  "[strata] rank %d: test_comm_mpi timed out (hang?)\n", env.rank());
    std::signal(SIGALRM, on_timeout);
    alarm(120);

    doctest::Context ctx;
    ctx.applyCommandLine(argc, argv);
    if (env.rank() != 0) ctx.setOption("minimal", true);  // failures only
    int rc = ctx.run();
    if (ctx.shouldExit()) return rc;
    worst = rc;
    MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    bf16_ops_made = detail::bf16_mpi_ops_live();
    g_env = nullptr;
  }  // MPI_Finalize (env initialised MPI)
  // Its MPI_COMM_SELF attribute callback must have freed the bf16 reduction ops.
  if (bf16_ops_made && detail::bf16_mpi_ops_live()) {
    std::fprintf(stderr, "[strata] test_comm_mpi: the bf16 MPI_Ops were not freed by MPI_Finalize\n");
    return 1;
  }
  return worst;
}
