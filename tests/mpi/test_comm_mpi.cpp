// The communicator suite (tests/comm) on mpi_communicator, and what only MPI has:
// the world's private duplicate of MPI_COMM_WORLD, matching by tag rather than posting
// order, bf16 reductions through user-defined MPI ops (rounding bound, ties to even;
// freed by MPI_Finalize), exact-size receives, and errors naming the MPI call, the
// communicator and the rank.
// mpi-ranks: 1 2 4 8
//
// Every rank runs every test case in the same order; checks use CHECK (not
// REQUIRE) so a failing rank keeps calling the same collectives as the others
// instead of leaving them blocked.

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <strata/comm/mpi.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string>
#include <unistd.h>
#include <vector>

#include "../comm/host_memory.hpp"

using namespace strata::comm;

namespace {

mpi_environment* g_env = nullptr;
mpi_communicator& world() { return g_env->world(); }

}  // namespace

namespace comm_suite {
struct policy : host_memory {
  using comm = mpi_communicator;
  static comm& world() { return ::world(); }
};
}  // namespace comm_suite

#include "../comm/comm_suite.hpp"

namespace {

// Shows the rank in every failure message of the enclosing test case.
#define RANK_INFO INFO("world rank ", world().rank(), " of ", world().size())

// True on every rank iff it is true on every rank (for checks whose result
// must be identical everywhere).
bool all_ranks(bool b) {
  std::int32_t v = b ? 1 : 0;
  world().all_reduce(&v, 1, reduce_op::min);
  return v == 1;
}

using comm_suite::comm_error_of;  // the message of the comm_error a call throws
using comm_suite::contains;

// ---- bf16 ------------------------------------------------------------------------
// MPI has no bf16: it travels as 16-bit words and reduces through user-defined
// ops (float arithmetic, rounded back to bf16 at each combining step). The suite
// checks moves bit for bit and reductions where every partial sum is a bf16; here,
// reductions that must round: against a reference computed in double from the same
// bf16 inputs, within the rounding bound.

using strata::bf16;

std::uint16_t bits_of(bf16 x) { return x.bits; }

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

TEST_CASE("group matches mixed bf16 / float / int64 messages by tag, not posting order") {
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
      comm_error_of([&] { c.all_reduce(static_cast<bf16*>(nullptr), 3, reduce_op::sum); });
  CHECK(contains(null_err, "MPI_Allreduce"));
  CHECK(contains(null_err, "'world'"));
  CHECK(contains(null_err, "rank " + std::to_string(r) + " of " + std::to_string(P)));
  CHECK(contains(null_err, "null buffer"));

  bf16 x(1.0f);
  const std::string big_err = comm_error_of(
      [&] { c.reduce_scatter(&x, &x, static_cast<std::size_t>(INT_MAX) + 1, reduce_op::max); });
  CHECK(contains(big_err, "MPI_Reduce_scatter_block"));
  CHECK(contains(big_err, "INT_MAX"));

  const std::string send_err = comm_error_of([&] { c.send(&x, 1, P, 0); });
  CHECK(contains(send_err, "MPI_Send"));
  CHECK(contains(send_err, "peer " + std::to_string(P)));

  // Still usable, and the user ops are in place for the rest of the run.
  CHECK(detail::bf16_mpi_ops_live());
  bf16 one(1.0f);
  c.all_reduce(&one, 1, reduce_op::sum);
  CHECK(static_cast<float>(one) == static_cast<float>(P));
}

TEST_CASE("MPI errors become comm_error naming the call, communicator and rank") {
  RANK_INFO;
  auto& c = world();
  const int P = c.size(), r = c.rank();
  float x = 1;

  const std::string send_err = comm_error_of([&] { c.send(&x, 1, P, 0); });
  CHECK(contains(send_err, "MPI_Send"));
  CHECK(contains(send_err, "'world'"));
  CHECK(contains(send_err, "rank " + std::to_string(r) + " of " + std::to_string(P)));
  CHECK(contains(send_err, "peer " + std::to_string(P)));
  if (r == 0) MESSAGE(send_err);

  const std::string bcast_err = comm_error_of([&] { c.broadcast(&x, 1, P); });
  CHECK(contains(bcast_err, "MPI_Bcast"));
  CHECK(contains(bcast_err, "rank " + std::to_string(r)));

  const std::string group_err =
      comm_error_of([&] { c.group({send_op(&x, 1, P, 0)}); });
  CHECK(contains(group_err, "MPI_Isend"));

  const std::string big_err = comm_error_of(
      [&] { c.all_reduce(&x, static_cast<std::size_t>(INT_MAX) + 1, reduce_op::sum); });
  CHECK(contains(big_err, "MPI_Allreduce"));
  CHECK(contains(big_err, "INT_MAX"));

  const std::string null_err =
      comm_error_of([&] { c.all_reduce(static_cast<float*>(nullptr), 3, reduce_op::sum); });
  CHECK(contains(null_err, "null buffer"));

  // The communicator stays usable after a rejected call.
  std::int32_t one = 1;
  c.all_reduce(&one, 1, reduce_op::sum);
  CHECK(one == P);
}

TEST_CASE("recv of a shorter message than expected is an error (elements, not bytes)") {
  RANK_INFO;
  auto& c = world();
  const int P = c.size(), r = c.rank();
  if (P < 2 || r > 1) return;
  std::int32_t buf[4] = {1, 2, 3, 4};
  bf16 half[4] = {bf16(1.0f), bf16(2.0f), bf16(3.0f), bf16(4.0f)};
  if (r == 0) {
    c.send(buf, 3, 1, 0);
    c.send(half, 3, 1, 23);
  } else {
    CHECK(contains(comm_error_of([&] { c.recv(buf, 4, 0, 0); }), "received 3 elements, expected 4"));
    CHECK(contains(comm_error_of([&] { c.recv(half, 4, 0, 23); }), "received 3 elements, expected 4"));
  }
}

TEST_CASE("group_of's errors say what is wrong with the list") {
  RANK_INFO;
  auto& c = world();
  const int P = c.size(), r = c.rank();
  // Rank 0 leaves itself out of its list.
  std::vector<int> mine = r == 0 ? std::vector<int>{} : std::vector<int>{r};
  CHECK(contains(comm_error_of([&] { (void)c.group_of(mine); }), "is not in"));
  const std::vector<int> outside = {r, P};
  CHECK(contains(comm_error_of([&] { (void)c.group_of(outside); }), "outside [0, " + std::to_string(P) + ")"));
  // Ranks 0 and 1 pass different lists for the same group.
  if (P >= 2) {
    std::vector<int> l = r == 0 ? std::vector<int>{0, 1} : r == 1 ? std::vector<int>{1, 0}
                                                                  : std::vector<int>{r};
    const std::string e2 = comm_error_of([&] { (void)c.group_of(l); });
    CHECK(contains(e2, "every member must pass the same list"));
  }
  CHECK(all_ranks(true));
}

TEST_CASE("errors on a sub-communicator name it; a moved-from communicator owns nothing") {
  RANK_INFO;
  auto& c = world();
  const int r = c.rank();
  mpi_communicator tensor = c.split(r / 2, r, "tensor");
  CHECK(tensor.name() == "tensor");
  const std::string e = comm_error_of([&] {
    float x = 0;
    tensor.broadcast(&x, 1, tensor.size());
  });
  CHECK(contains(e, "'tensor'"));
  CHECK(contains(e, "MPI_Bcast"));
  mpi_communicator moved = std::move(tensor);
  CHECK(tensor.native() == MPI_COMM_NULL);  // NOLINT(bugprone-use-after-move): specified state
  std::int32_t one = 1;
  moved.all_reduce(&one, 1, reduce_op::sum);
  CHECK(one == moved.size());
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
