// requires: mpi cuda nccl
// nccl_communicator on device buffers: every collective against closed-form
// values (float, double, int32, int64 and bf16), grouped p2p (self exchange at
// world size 1, a ring otherwise; bf16 and float in one group),
// split / group_of / agree, argument errors, and the watchdog: an unmatched
// recv and a stuck stream must produce a comm_error naming the operation and
// the communicator instead of a hang.
//
// Plain ./gpu_test_nccl (what ctest runs) is a world of one rank; under
// mpiexec -n N the same checks run with N ranks when each rank of a node has
// its own GPU. Exits 77 when there is no CUDA device.

#include <strata/comm/nccl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

using namespace strata::comm;
using namespace std::chrono_literals;

namespace {

int g_failures = 0;
int g_rank = 0;

void check(bool ok, const char* what, int line) {
  if (ok) return;
  ++g_failures;
  std::fprintf(stderr, "[rank %d] FAILED test_nccl.cu:%d: %s\n", g_rank, line, what);
}
#define CHECK(cond) check(static_cast<bool>(cond), #cond, __LINE__)

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Runs f, which must throw comm_error; returns its message ("" if it did not).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const comm_error& e) {
    return e.what();
  }
  return {};
}

void cu(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Device buffer; uploads/downloads are ordered on the communicator's stream
// so they cannot race the collectives.
template <class T>
class dbuf {
 public:
  explicit dbuf(std::size_t n) : n_(n) { cu(cudaMalloc(&p_, (n ? n : 1) * sizeof(T)), "cudaMalloc"); }
  dbuf(const dbuf&) = delete;
  dbuf& operator=(const dbuf&) = delete;
  ~dbuf() { (void)cudaFree(p_); }
  T* get() const { return p_; }
  void put(nccl_communicator& c, const std::vector<T>& v) {
    cu(cudaMemcpyAsync(p_, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, c.stream()),
       "cudaMemcpyAsync H2D");
  }
  std::vector<T> take(nccl_communicator& c, std::size_t n) {
    c.synchronize();
    std::vector<T> v(n);
    cu(cudaMemcpyAsync(v.data(), p_, n * sizeof(T), cudaMemcpyDeviceToHost, c.stream()), "cudaMemcpyAsync D2H");
    cu(cudaStreamSynchronize(c.stream()), "cudaStreamSynchronize");
    return v;
  }
  std::vector<T> take(nccl_communicator& c) { return take(c, n_); }

 private:
  T* p_ = nullptr;
  std::size_t n_;
};

__global__ void fill(float* p, int n, float v) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

// Occupies a stream for `ns` nanoseconds (bounded, so the test always ends).
__global__ void spin_ns(unsigned long long ns) {
  unsigned long long t0 = 0, t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

// ---- collectives ----------------------------------------------------------------

template <class T>
void test_all_reduce(nccl_communicator& c) {
  const int N = c.size(), r = c.rank();
  const std::size_t n = 1000;
  dbuf<T> b(n);
  std::vector<T> x(n);
  auto val = [&](int rank, std::size_t i) { return static_cast<T>(rank + 1) + static_cast<T>(i % 97); };
  for (reduce_op op : {reduce_op::sum, reduce_op::max, reduce_op::min}) {
    for (std::size_t i = 0; i < n; ++i) x[i] = val(r, i);
    b.put(c, x);
    c.all_reduce(b.get(), n, op);
    const auto got = b.take(c);
    bool ok = true;
    for (std::size_t i = 0; i < n; ++i) {
      const T want = op == reduce_op::sum   ? static_cast<T>(N * (N + 1) / 2) + static_cast<T>(N) * static_cast<T>(i % 97)
                     : op == reduce_op::max ? val(N - 1, i)
                                            : val(0, i);
      ok = ok && got[i] == want;
    }
    CHECK(ok);
  }
}

template <class T>
void test_all_gather(nccl_communicator& c) {
  const auto N = static_cast<std::size_t>(c.size()), r = static_cast<std::size_t>(c.rank());
  const std::size_t n = 257;
  auto val = [](std::size_t rank, std::size_t i) { return static_cast<T>(rank * 1000 + i); };
  auto verify = [&](const std::vector<T>& got) {
    bool ok = true;
    for (std::size_t q = 0; q < N; ++q)
      for (std::size_t i = 0; i < n; ++i) ok = ok && got[q * n + i] == val(q, i);
    return ok;
  };
  std::vector<T> mine(n);
  for (std::size_t i = 0; i < n; ++i) mine[i] = val(r, i);

  dbuf<T> s(n), out(N * n);
  s.put(c, mine);
  c.all_gather(s.get(), out.get(), n);
  CHECK(verify(out.take(c)));

  // NCCL's in-place form: own block already at recv + rank*n.
  dbuf<T> inplace(N * n);
  cu(cudaMemcpyAsync(inplace.get() + r * n, mine.data(), n * sizeof(T), cudaMemcpyHostToDevice, c.stream()),
     "cudaMemcpyAsync");
  c.all_gather(inplace.get() + r * n, inplace.get(), n);
  CHECK(verify(inplace.take(c)));

  // Any other overlap (send == recv) is staged by the backend.
  dbuf<T> alias(N * n);
  alias.put(c, mine);
  c.all_gather(alias.get(), alias.get(), n);
  CHECK(verify(alias.take(c)));
}

template <class T>
void test_reduce_scatter(nccl_communicator& c) {
  const auto N = static_cast<std::size_t>(c.size()), r = static_cast<std::size_t>(c.rank());
  const std::size_t n = 129;
  std::vector<T> x(N * n);
  for (std::size_t j = 0; j < x.size(); ++j) x[j] = static_cast<T>((r + 1) * (j % 50));
  auto verify = [&](const std::vector<T>& got) {
    bool ok = true;
    for (std::size_t i = 0; i < n; ++i)
      ok = ok && got[i] == static_cast<T>(N * (N + 1) / 2 * ((r * n + i) % 50));
    return ok;
  };
  dbuf<T> s(N * n), out(n);
  s.put(c, x);
  c.reduce_scatter(s.get(), out.get(), n, reduce_op::sum);
  CHECK(verify(out.take(c)));

  // MPI-style in place (recv == send): result in the first block.
  dbuf<T> alias(N * n);
  alias.put(c, x);
  c.reduce_scatter(alias.get(), alias.get(), n, reduce_op::sum);
  CHECK(verify(alias.take(c, n)));
}

template <class T>
void test_broadcast(nccl_communicator& c) {
  const int root = c.size() - 1;
  const std::size_t n = 333;
  std::vector<T> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = c.rank() == root ? static_cast<T>(7 * i + 3) : static_cast<T>(-1);
  dbuf<T> b(n);
  b.put(c, x);
  c.broadcast(b.get(), n, root);
  const auto got = b.take(c);
  bool ok = true;
  for (std::size_t i = 0; i < n; ++i) ok = ok && got[i] == static_cast<T>(7 * i + 3);
  CHECK(ok);
}

template <class T>
void test_all_to_all(nccl_communicator& c) {
  const auto N = static_cast<std::size_t>(c.size()), r = static_cast<std::size_t>(c.rank());
  const std::size_t n = 33;
  std::vector<T> x(N * n);
  for (std::size_t p = 0; p < N; ++p)
    for (std::size_t i = 0; i < n; ++i) x[p * n + i] = static_cast<T>(r * 10000 + p * 100 + i);
  auto verify = [&](const std::vector<T>& got) {
    bool ok = true;
    for (std::size_t p = 0; p < N; ++p)
      for (std::size_t i = 0; i < n; ++i) ok = ok && got[p * n + i] == static_cast<T>(p * 10000 + r * 100 + i);
    return ok;
  };
  dbuf<T> s(N * n), out(N * n);
  s.put(c, x);
  c.all_to_all(s.get(), out.get(), n);
  CHECK(verify(out.take(c)));

  dbuf<T> inplace(N * n);  // staged by the backend
  inplace.put(c, x);
  c.all_to_all(inplace.get(), inplace.get(), n);
  CHECK(verify(inplace.take(c)));
}

// Ring exchange; at world size 1 next == prev == 0: a send/recv to self that
// only works because both are posted in one group.
void test_p2p(nccl_communicator& c) {
  const int N = c.size(), r = c.rank();
  const int next = (r + 1) % N, prev = (r + N - 1) % N;
  const std::size_t n = 100;
  std::vector<float> xf(n);
  std::vector<std::int64_t> xi(n);
  for (std::size_t i = 0; i < n; ++i) {
    xf[i] = static_cast<float>(r * 1000 + static_cast<int>(i));
    xi[i] = static_cast<std::int64_t>(r) * 5'000'000'000LL + static_cast<std::int64_t>(i);
  }
  dbuf<float> sf(n), rf(n);
  dbuf<std::int64_t> si(n), ri(n);
  sf.put(c, xf);
  si.put(c, xi);

  // Mixed element types in one group, plus no_peer entries that are skipped.
  const p2p_op ops[] = {send_op(sf.get(), n, next, 3), recv_op(rf.get(), n, prev, 3),
                        send_op(si.get(), n, next, 4), recv_op(ri.get(), n, prev, 4),
                        send_op(sf.get(), n, no_peer), recv_op(rf.get(), n, no_peer)};
  c.group(ops);
  const auto gf = rf.take(c);
  const auto gi = ri.take(c);
  bool ok = true;
  for (std::size_t i = 0; i < n; ++i)
    ok = ok && gf[i] == static_cast<float>(prev * 1000 + static_cast<int>(i)) &&
         gi[i] == static_cast<std::int64_t>(prev) * 5'000'000'000LL + static_cast<std::int64_t>(i);
  CHECK(ok);

  dbuf<float> out(n);
  c.sendrecv(sf.get(), n, next, out.get(), n, prev, 0);
  const auto g2 = out.take(c);
  ok = true;
  for (std::size_t i = 0; i < n; ++i) ok = ok && g2[i] == static_cast<float>(prev * 1000 + static_cast<int>(i));
  CHECK(ok);

  // Only no_peer entries: nothing is issued.
  const auto before = c.ops_issued();
  c.group({send_op(sf.get(), n, no_peer), recv_op(rf.get(), n, no_peer)});
  c.send(sf.get(), n, no_peer);
  c.recv(rf.get(), n, no_peer);
  CHECK(c.ops_issued() == before);

  // Standalone send/recv pairs between distinct ranks (skipped at size 1,
  // where a standalone self send can never complete).
  if (N > 1) {
    dbuf<float> got(n);
    if (r % 2 == 0) {
      c.send(sf.get(), n, next);
      c.recv(got.get(), n, prev);
    } else {
      c.recv(got.get(), n, prev);
      c.send(sf.get(), n, next);
    }
    const auto g3 = got.take(c);
    ok = true;
    for (std::size_t i = 0; i < n; ++i) ok = ok && g3[i] == static_cast<float>(prev * 1000 + static_cast<int>(i));
    // Even ranks send first, odd ranks receive first: rank 0's send meets
    // rank 1's recv, which unblocks the rest of the ring (also for odd N).
    CHECK(ok);
  }
}

template <class T>
void test_collectives_for(nccl_communicator& c) {
  test_all_reduce<T>(c);
  test_all_gather<T>(c);
  test_reduce_scatter<T>(c);
  test_broadcast<T>(c);
  test_all_to_all<T>(c);
}

// ---- bf16 (ncclBfloat16) --------------------------------------------------------
// Mixed-precision traffic: bf16 partial sums reduced in tensor groups, bf16
// activations moved between stages. Reduction inputs are integers 1..4, so
// every partial sum (NCCL keeps them in bf16) is an integer <= 4*N: exact in
// bf16's 8 significant bits for N <= 64, whatever order NCCL reduces in.
// Moves are checked bit for bit on patterns that include NaNs and infinities.

using strata::bf16;

int bf16_input(int rank, std::size_t i) { return 1 + static_cast<int>((static_cast<std::size_t>(rank) + i) % 4); }

std::uint16_t bf16_pattern(std::size_t rank, std::size_t i) {
  return static_cast<std::uint16_t>((rank * 7919u + i * 131u) & 0xffffu);
}

void test_bf16_all_reduce(nccl_communicator& c) {
  const int N = c.size(), r = c.rank();
  if (N > 64) return;  // the inputs' exactness premise
  const std::size_t n = 1000;
  dbuf<bf16> b(n);
  std::vector<bf16> x(n);
  for (reduce_op op : {reduce_op::sum, reduce_op::max, reduce_op::min}) {
    for (std::size_t i = 0; i < n; ++i) x[i] = bf16(static_cast<float>(bf16_input(r, i)));
    b.put(c, x);
    c.all_reduce(b.get(), n, op);
    const auto got = b.take(c);
    bool ok = true;
    for (std::size_t i = 0; i < n; ++i) {
      int want = bf16_input(0, i);
      for (int q = 1; q < N; ++q) {
        const int v = bf16_input(q, i);
        want = op == reduce_op::sum ? want + v : op == reduce_op::max ? std::max(want, v) : std::min(want, v);
      }
      ok = ok && got[i].bits == bf16(static_cast<float>(want)).bits;
    }
    CHECK(ok);
  }
}

void test_bf16_all_gather(nccl_communicator& c) {
  const auto N = static_cast<std::size_t>(c.size()), r = static_cast<std::size_t>(c.rank());
  const std::size_t n = 257;
  auto verify = [&](const std::vector<bf16>& got) {
    bool ok = true;
    for (std::size_t q = 0; q < N; ++q)
      for (std::size_t i = 0; i < n; ++i) ok = ok && got[q * n + i].bits == bf16_pattern(q, i);
    return ok;
  };
  std::vector<bf16> mine(n);
  for (std::size_t i = 0; i < n; ++i) mine[i] = bf16::from_bits(bf16_pattern(r, i));

  dbuf<bf16> s(n), out(N * n);
  s.put(c, mine);
  c.all_gather(s.get(), out.get(), n);
  CHECK(verify(out.take(c)));

  // NCCL's in-place form: own block already at recv + rank*n.
  dbuf<bf16> inplace(N * n);
  cu(cudaMemcpyAsync(inplace.get() + r * n, mine.data(), n * sizeof(bf16), cudaMemcpyHostToDevice, c.stream()),
     "cudaMemcpyAsync");
  c.all_gather(inplace.get() + r * n, inplace.get(), n);
  CHECK(verify(inplace.take(c)));
}

void test_bf16_reduce_scatter(nccl_communicator& c) {
  const int N = c.size(), r = c.rank();
  if (N > 64) return;
  const std::size_t n = 129, total = static_cast<std::size_t>(N) * n;
  std::vector<bf16> x(total);
  for (std::size_t k = 0; k < total; ++k) x[k] = bf16(static_cast<float>(bf16_input(r, k)));
  dbuf<bf16> s(total), out(n);
  s.put(c, x);
  c.reduce_scatter(s.get(), out.get(), n, reduce_op::sum);
  const auto got = out.take(c);
  bool ok = true;
  for (std::size_t j = 0; j < n; ++j) {
    const std::size_t k = static_cast<std::size_t>(r) * n + j;
    int want = 0;
    for (int q = 0; q < N; ++q) want += bf16_input(q, k);
    ok = ok && got[j].bits == bf16(static_cast<float>(want)).bits;
  }
  CHECK(ok);
}

// bf16 activations and float gradients in one group around the ring (self
// exchange at size 1), then a bf16 sendrecv.
void test_bf16_p2p(nccl_communicator& c) {
  const int N = c.size(), r = c.rank();
  const int next = (r + 1) % N, prev = (r + N - 1) % N;
  const std::size_t n = 1000;
  std::vector<bf16> act(n);
  std::vector<float> grad(n);
  for (std::size_t i = 0; i < n; ++i) {
    act[i] = bf16::from_bits(bf16_pattern(static_cast<std::size_t>(r), i));
    grad[i] = -static_cast<float>(r * 1000 + static_cast<int>(i));
  }
  dbuf<bf16> sa(n), ra(n);
  dbuf<float> sg(n), rg(n);
  sa.put(c, act);
  sg.put(c, grad);
  const p2p_op ops[] = {send_op(sa.get(), n, next, 1), recv_op(ra.get(), n, prev, 1),
                        send_op(sg.get(), n, prev, 2), recv_op(rg.get(), n, next, 2)};
  c.group(ops);
  const auto ga = ra.take(c);
  const auto gg = rg.take(c);
  bool ok = true;
  for (std::size_t i = 0; i < n; ++i)
    ok = ok && ga[i].bits == bf16_pattern(static_cast<std::size_t>(prev), i) &&
         gg[i] == -static_cast<float>(next * 1000 + static_cast<int>(i));
  CHECK(ok);

  dbuf<bf16> out(n);
  c.sendrecv(sa.get(), n, next, out.get(), n, prev, 0);
  const auto g2 = out.take(c);
  ok = true;
  for (std::size_t i = 0; i < n; ++i) ok = ok && g2[i].bits == bf16_pattern(static_cast<std::size_t>(prev), i);
  CHECK(ok);
}

void test_bf16(nccl_communicator& c) {
  test_bf16_all_reduce(c);
  test_bf16_all_gather(c);
  test_bf16_reduce_scatter(c);
  test_bf16_p2p(c);
}

// ---- host-synchronous operations ------------------------------------------------

void test_agree_barrier(nccl_communicator& c) {
  const int N = c.size();
  c.barrier();
  c.agree(true, "never shown");
  const std::string msg = error_of([&] { c.agree(c.rank() != N - 1, "boom from the last rank"); });
  CHECK(contains(msg, "check failed on rank " + std::to_string(N - 1)));
  CHECK(contains(msg, "boom from the last rank"));
  CHECK(contains(msg, "'" + std::string(c.name()) + "'"));
  CHECK(!c.aborted());  // a failed check is not a communication failure
  // Long messages are cut at max_agree_message, never overflow the scratch.
  const std::string big(10000, 'x');
  const std::string msg2 = error_of([&] { c.agree(false, big); });
  CHECK(contains(msg2, std::string(nccl_communicator::max_agree_message, 'x')));
  CHECK(!contains(msg2, std::string(nccl_communicator::max_agree_message + 1, 'x')));
  c.barrier();
}

void test_split(nccl_communicator& c) {
  const int N = c.size(), r = c.rank();
  // Parity groups, ordered by descending rank through the key.
  auto sub = c.split(r % 2, -r, "data");
  int expect_size = 0, expect_rank = 0;
  for (int q = 0; q < N; ++q)
    if (q % 2 == r % 2) {
      ++expect_size;
      if (q > r) ++expect_rank;
    }
  CHECK(sub.name() == "data");
  CHECK(sub.size() == expect_size);
  CHECK(sub.rank() == expect_rank);
  CHECK(sub.stream() == c.stream());  // program order with the parent
  dbuf<std::int32_t> b(1);
  b.put(sub, {r + 1});
  sub.all_reduce(b.get(), 1, reduce_op::sum);
  int want = 0;
  for (int q = 0; q < N; ++q)
    if (q % 2 == r % 2) want += q + 1;
  CHECK(b.take(sub)[0] == want);
  sub.barrier();

  auto dflt = c.split(0, r);
  CHECK(dflt.name() == std::string(c.name()) + ".split0");
  CHECK(dflt.size() == N && dflt.rank() == r);

  // Every rank throws (agree), none is left inside ncclCommSplit.
  const std::string bad = error_of([&] { (void)c.split(-1, 0); });
  CHECK(contains(bad, "color must be >= 0"));
  CHECK(!c.aborted());

  // group_of / group_from_partition with a single group of everyone, in
  // reverse order: position in the list becomes the rank.
  std::vector<int> all;
  for (int q = N - 1; q >= 0; --q) all.push_back(q);
  const std::vector<std::vector<int>> partition{all};
  auto g = group_from_partition(c, std::span<const std::vector<int>>(partition));
  CHECK(g.size() == N);
  CHECK(g.rank() == N - 1 - r);
  CHECK(g.name() == std::string(c.name()) + ".group0");

  const std::vector<int> out_of_range{r, N};
  const std::string bad2 = error_of([&] { (void)c.group_of(out_of_range); });
  CHECK(contains(bad2, "outside [0, " + std::to_string(N) + ")"));
  CHECK(!c.aborted());
}

// ---- streams -----------------------------------------------------------------------

void test_streams(nccl_communicator& c) {
  const int N = c.size();
  const cudaStream_t original = c.stream();
  cudaStream_t side = nullptr, producer = nullptr;
  cudaEvent_t done = nullptr;
  cu(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "cudaStreamCreate");
  cu(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking), "cudaStreamCreate");
  cu(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
  {
    c.set_stream(side);
    CHECK(c.stream() == side);
    const int n = 4096;
    dbuf<float> b(n);
    // Producer writes, the communicator joins it, a consumer waits for ours.
    fill<<<(n + 255) / 256, 256, 0, producer>>>(b.get(), n, 2.0f);
    cu(cudaGetLastError(), "fill launch");
    c.wait_for(producer);
    c.all_reduce(b.get(), n, reduce_op::sum);
    c.record(done);
    cu(cudaStreamWaitEvent(producer, done, 0), "cudaStreamWaitEvent");
    std::vector<float> got(n);
    cu(cudaMemcpyAsync(got.data(), b.get(), n * sizeof(float), cudaMemcpyDeviceToHost, producer), "D2H");
    cu(cudaStreamSynchronize(producer), "cudaStreamSynchronize");
    bool ok = true;
    for (float v : got) ok = ok && v == 2.0f * static_cast<float>(N);
    CHECK(ok);
    CHECK(c.query());
    c.synchronize();
    c.set_stream(original);
  }
  cu(cudaEventDestroy(done), "cudaEventDestroy");
  cu(cudaStreamDestroy(producer), "cudaStreamDestroy");
  cu(cudaStreamDestroy(side), "cudaStreamDestroy");
}

// ---- argument errors (rejected before NCCL, communicator stays usable) -----------

void test_argument_errors(nccl_communicator& c) {
  std::vector<float> host(4);
  const std::string m1 = error_of([&] { c.all_reduce(host.data(), host.size(), reduce_op::sum); });
  CHECK(contains(m1, "plain host memory"));
  CHECK(contains(m1, "'" + std::string(c.name()) + "'"));
  CHECK(contains(m1, "test_nccl.cu:"));  // the caller's line

  dbuf<float> d(4);
  const std::string m2 = error_of([&] { c.send(d.get(), 4, c.size()); });
  CHECK(contains(m2, "is not a rank"));
  const std::string m3 = error_of([&] { c.group({send_op(d.get(), 4, 0, 40000)}); });
  CHECK(contains(m3, "outside [0, 32767]"));
  const std::string m4 = error_of([&] { c.broadcast(static_cast<float*>(nullptr), 4, 0); });
  CHECK(contains(m4, "null buffer"));
  const std::string m5 = error_of([&] { c.broadcast(d.get(), 4, -1); });
  CHECK(contains(m5, "broadcast root -1"));
  CHECK(!c.aborted());
  c.barrier();
}

void run_all(nccl_communicator& c) {
  test_collectives_for<float>(c);
  test_collectives_for<double>(c);
  test_collectives_for<std::int32_t>(c);
  test_collectives_for<std::int64_t>(c);
  test_bf16(c);
  test_p2p(c);
  test_agree_barrier(c);
  test_split(c);
  test_streams(c);
  test_argument_errors(c);
  c.synchronize();
}

// ---- single(), moves, timeout configuration ------------------------------------

void test_single_and_moves() {
  auto a = nccl_communicator::single("moved");
  CHECK(a.size() == 1 && a.rank() == 0);
  int dev = -1;
  cu(cudaGetDevice(&dev), "cudaGetDevice");
  CHECK(a.device() == dev);
  auto b = std::move(a);
  CHECK(b.name() == "moved");
  CHECK(a.size() == 0);  // NOLINT(bugprone-use-after-move): documented state
  CHECK(contains(error_of([&] { a.barrier(); }), "moved-from"));
  dbuf<float> x(8);
  x.put(b, std::vector<float>(8, 1.5f));
  b.all_reduce(x.get(), 8, reduce_op::sum);
  CHECK(x.take(b)[7] == 1.5f);
  a = std::move(b);  // move-assign into the moved-from object
  CHECK(a.name() == "moved");
  a.barrier();
}

void test_timeout_config() {
  const char* saved = std::getenv("STRATA_NCCL_TIMEOUT_S");
  const std::string keep = saved ? saved : "";
  setenv("STRATA_NCCL_TIMEOUT_S", "7.5", 1);
  CHECK(nccl_communicator::default_timeout() == 7500ms);
  setenv("STRATA_NCCL_TIMEOUT_S", "42", 1);
  {
    auto c = nccl_communicator::single("timeouts");
    CHECK(c.timeout() == 42s);
    c.set_timeout(3s);
    CHECK(c.split(0, 0).timeout() == 3s);  // children inherit
    CHECK(contains(error_of([&] { c.set_timeout(0ms); }), "must be positive"));
  }
  for (const char* bad : {"abc", "-1", "0", "5s"}) {
    setenv("STRATA_NCCL_TIMEOUT_S", bad, 1);
    CHECK(contains(error_of([] { (void)nccl_communicator::default_timeout(); }), "STRATA_NCCL_TIMEOUT_S"));
  }
  unsetenv("STRATA_NCCL_TIMEOUT_S");
  CHECK(nccl_communicator::default_timeout() == 300s);
  if (saved) setenv("STRATA_NCCL_TIMEOUT_S", keep.c_str(), 1);
}

// ---- the watchdog ------------------------------------------------------------------

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A recv that nobody matches. At world size 1 the peer is this rank; NCCL
// may reject the lone self-recv (invalid usage) or it may wait: either way
// the result must be a comm_error naming the op and the communicator, not a
// hang.
void test_watchdog_unmatched_recv() {
  auto w = nccl_communicator::single("watchdog");
  w.set_timeout(2s);
  dbuf<float> b(4);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = error_of([&] {
    w.recv(b.get(), 4, 0);
    w.synchronize();
  });
  const double took = seconds_since(t0);
  std::printf("[rank %d] unmatched recv -> after %.2f s: %s\n", g_rank, took, msg.c_str());
  CHECK(contains(msg, "recv(f32 x 4 from rank 0)"));
  CHECK(contains(msg, "'watchdog'"));
  CHECK(contains(msg, "op #1"));
  CHECK(took < 30.0);
  CHECK(w.aborted());
  const std::string again = error_of([&] { w.all_reduce(b.get(), 4, reduce_op::sum); });
  CHECK(contains(again, "aborted earlier"));
}

// A genuine timeout: the stream is busy for 3 s ahead of an all_reduce, the
// watchdog allows 1 s.
void test_watchdog_timeout() {
  auto w = nccl_communicator::single("stuck");
  w.set_timeout(1s);
  dbuf<float> b(4);
  spin_ns<<<1, 1, 0, w.stream()>>>(3'000'000'000ULL);
  cu(cudaGetLastError(), "spin launch");
  w.all_reduce(b.get(), 4, reduce_op::sum);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = error_of([&] { w.synchronize(); });
  const double took = seconds_since(t0);
  std::printf("[rank %d] stuck stream -> after %.2f s: %s\n", g_rank, took, msg.c_str());
  CHECK(contains(msg, "no operation completed within 1 s"));
  CHECK(contains(msg, "op #1 all_reduce(f32 x 4, sum)"));
  CHECK(contains(msg, "'stuck'"));
  CHECK(contains(msg, "ncclCommAbort"));
  CHECK(took >= 0.9 && took < 60.0);
  CHECK(w.aborted());
  cu(cudaStreamSynchronize(w.stream()), "cudaStreamSynchronize");  // let the spin end
}

// Multi-rank only: rank 0 waits for a message rank 1 never sends.
void test_watchdog_missing_peer(nccl_communicator& world) {
  auto w = world.split(0, world.rank(), "p2p-watchdog");
  w.set_timeout(2s);
  if (w.rank() == 0) {
    dbuf<float> b(4);
    const std::string msg = error_of([&] {
      w.recv(b.get(), 4, 1);
      w.synchronize();
    });
    std::printf("[rank 0] missing peer -> %s\n", msg.c_str());
    CHECK(contains(msg, "recv(f32 x 4 from rank 1)"));
    CHECK(contains(msg, "'p2p-watchdog'"));
  }
  w.abort("test over");  // the others never used it; no orderly finalize needed
}

}  // namespace

int main(int argc, char** argv) {
  int ndev = 0;
  const cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    std::printf("no CUDA device: skipping\n");
    if (e != cudaSuccess) std::fprintf(stderr, "(cudaGetDeviceCount: %s)\n", cudaGetErrorString(e));
    return 77;
  }
  try {
    mpi_environment env(&argc, &argv);
    auto& mpi = env.world();
    g_rank = mpi.rank();

    // The NCCL world needs one GPU per rank on every node.
    MPI_Comm node = MPI_COMM_NULL;
    MPI_Comm_split_type(mpi.native(), MPI_COMM_TYPE_SHARED, mpi.rank(), MPI_INFO_NULL, &node);
    int local_size = 1;
    MPI_Comm_size(node, &local_size);
    MPI_Comm_free(&node);
    int fits = local_size <= ndev ? 1 : 0, all_fit = 0;
    MPI_Allreduce(&fits, &all_fit, 1, MPI_INT, MPI_MIN, mpi.native());

    if (all_fit) {
      auto world = nccl_communicator::world(mpi);
      CHECK(world.size() == mpi.size() && world.rank() == mpi.rank());
      CHECK(world.name() == "world");
      int dev = -1;
      cu(cudaGetDevice(&dev), "cudaGetDevice");
      CHECK(world.device() == dev);
      run_all(world);
      if (world.size() > 1) test_watchdog_missing_peer(world);
      world.barrier();
    } else if (mpi.rank() == 0) {
      std::printf("%d ranks per node but %d CUDA device(s): skipping the multi-rank NCCL world\n", local_size,
                  ndev);
    }

    // Per-rank worlds of one (no MPI involved).
    {
      auto solo = nccl_communicator::single();
      run_all(solo);
    }
    test_single_and_moves();
    test_timeout_config();
    test_watchdog_unmatched_recv();
    test_watchdog_timeout();

    int total = 0;
    MPI_Allreduce(&g_failures, &total, 1, MPI_INT, MPI_SUM, mpi.native());
    if (mpi.rank() == 0) std::printf("test_nccl: %s (%d failure(s))\n", total ? "FAILED" : "passed", total);
    return total ? 1 : 0;
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "[rank %d] test_nccl: unexpected exception: %s\n", g_rank, ex.what());
    return 1;
  }
}
