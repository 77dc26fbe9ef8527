// requires: mpi cuda nccl
// The communicator suite (tests/comm) on nccl_communicator over device buffers, and
// what only NCCL has: the world bootstrapped over MPI on this rank's device, the
// stream every split shares and set_stream / wait_for / record / query, arguments
// refused before NCCL sees them (plain host memory above all, naming the caller's
// line), agree's message cut at max_agree_message, ops_issued, single() and moves,
// STRATA_NCCL_TIMEOUT_S, and the watchdog: an unmatched recv, a stuck stream and a
// missing peer produce a comm_error naming the operation and the communicator
// instead of a hang (the missing peer's also carries the verdict of the MPI side channel).
//
// Plain ./gpu_test_nccl (what ctest runs) is a world of one rank; under mpiexec -n N
// the same checks run with N ranks when each rank of a node has its own GPU. The
// suite then runs again on a world of one per rank (single()). Exits 77 when there
// is no CUDA device.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <strata/comm/nccl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

using namespace strata::comm;
using namespace std::chrono_literals;

namespace {

nccl_communicator* g_comm = nullptr;  // under test: the MPI-bootstrapped world, then single()
int g_expected_size = 1, g_expected_rank = 0;
int g_rank = 0;

void cu(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

namespace comm_suite {
// Device memory; transfers are ordered on the communicator's stream so they cannot
// race its operations.
struct policy {
  using comm = nccl_communicator;
  static comm& world() { return *g_comm; }

  template <class T>
  class buffer {
   public:
    explicit buffer(std::size_t n) { cu(cudaMalloc(&p_, std::max<std::size_t>(n, 1) * sizeof(T)), "cudaMalloc"); }
    buffer(buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
    buffer& operator=(buffer&& o) noexcept {
      std::swap(p_, o.p_);
      return *this;
    }
    ~buffer() { (void)cudaFree(p_); }
    T* data() const { return p_; }

   private:
    T* p_ = nullptr;
  };
  template <class T>
  static buffer<T> allocate(std::size_t n) {
    return buffer<T>(n);
  }
  template <class T>
  static void upload(comm& c, const T* host, std::size_t n, T* dst) {
    cu(cudaMemcpyAsync(dst, host, n * sizeof(T), cudaMemcpyHostToDevice, c.stream()), "cudaMemcpyAsync H2D");
  }
  template <class T>
  static void download(comm& c, const T* src, std::size_t n, T* host) {
    cu(cudaMemcpyAsync(host, src, n * sizeof(T), cudaMemcpyDeviceToHost, c.stream()), "cudaMemcpyAsync D2H");
    cu(cudaStreamSynchronize(c.stream()), "cudaStreamSynchronize");
  }
};
}  // namespace comm_suite

#include "../comm/comm_suite.hpp"

namespace {

using comm_suite::contains;
using comm_suite::put;
using comm_suite::take;

template <class F>
std::string error_of(F&& f) {
  return comm_suite::comm_error_of(std::forward<F>(f));
}

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

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// ---- per communicator: run on the world and on single() -------------------------------
TEST_SUITE_BEGIN("nccl communicator");

TEST_CASE("nccl: the world has every rank, on this rank's device") {
  nccl_communicator& c = *g_comm;
  CHECK(c.size() == g_expected_size);
  CHECK(c.rank() == g_expected_rank);
  CHECK(c.name() == "world");
  int dev = -1;
  cu(cudaGetDevice(&dev), "cudaGetDevice");
  CHECK(c.device() == dev);
  CHECK(!c.aborted());
}

TEST_CASE("nccl: sub-communicators share the parent's stream and are named after it") {
  nccl_communicator& c = *g_comm;
  const int r = c.rank(), n = c.size();
  auto sub = c.split(r % 2, -r);
  CHECK(sub.stream() == c.stream());  // program order with the parent
  CHECK(sub.name() == std::string(c.name()) + ".split" + std::to_string(r % 2));
  std::vector<int> all;
  for (int q = n - 1; q >= 0; --q) all.push_back(q);
  const std::vector<std::vector<int>> partition{all};
  auto g = group_from_partition(c, std::span<const std::vector<int>>(partition));
  CHECK(g.rank() == n - 1 - r);
  CHECK(g.name() == std::string(c.name()) + ".group0");
  CHECK(!c.aborted());
}

TEST_CASE("nccl: agree names the communicator, is no abort, and cuts long messages") {
  nccl_communicator& c = *g_comm;
  const std::string msg = error_of([&] { c.agree(c.rank() != c.size() - 1, "boom from the last rank"); });
  CHECK(contains(msg, "'" + std::string(c.name()) + "'"));
  CHECK(!c.aborted());  // a failed check is not a communication failure
  // Long messages are cut at max_agree_message, never overflow the scratch.
  const std::string big(10000, 'x');
  const std::string msg2 = error_of([&] { c.agree(false, big); });
  CHECK(contains(msg2, std::string(nccl_communicator::max_agree_message, 'x')));
  CHECK(!contains(msg2, std::string(nccl_communicator::max_agree_message + 1, 'x')));
  c.barrier();
}

TEST_CASE("nccl: set_stream, wait_for, record and query order work across streams") {
  nccl_communicator& c = *g_comm;
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
    comm_suite::policy::buffer<float> b(n);
    // Producer writes, the communicator joins it, a consumer waits for ours.
    fill<<<(n + 255) / 256, 256, 0, producer>>>(b.data(), n, 2.0f);
    cu(cudaGetLastError(), "fill launch");
    c.wait_for(producer);
    c.all_reduce(b.data(), n, reduce_op::sum);
    c.record(done);
    cu(cudaStreamWaitEvent(producer, done, 0), "cudaStreamWaitEvent");
    std::vector<float> got(n);
    cu(cudaMemcpyAsync(got.data(), b.data(), n * sizeof(float), cudaMemcpyDeviceToHost, producer), "D2H");
    cu(cudaStreamSynchronize(producer), "cudaStreamSynchronize");
    CHECK(got == std::vector<float>(n, 2.0f * static_cast<float>(c.size())));
    CHECK(c.query());
    c.synchronize();
    c.set_stream(original);
  }
  cu(cudaEventDestroy(done), "cudaEventDestroy");
  cu(cudaStreamDestroy(producer), "cudaStreamDestroy");
  cu(cudaStreamDestroy(side), "cudaStreamDestroy");
}

TEST_CASE("nccl: bad arguments are refused before NCCL sees them; the communicator goes on") {
  nccl_communicator& c = *g_comm;
  std::vector<float> host(4);
  const std::string m1 = error_of([&] { c.all_reduce(host.data(), host.size(), reduce_op::sum); });
  CHECK(contains(m1, "plain host memory"));
  CHECK(contains(m1, "'" + std::string(c.name()) + "'"));
  CHECK(contains(m1, "test_nccl.cu:"));  // the caller's line
  auto d = put(c, std::vector<float>(4, 1.0f));
  CHECK(contains(error_of([&] { c.send(d.data(), 4, c.size()); }), "is not a rank"));
  CHECK(contains(error_of([&] { c.group({send_op(d.data(), 4, 0, 40000)}); }), "outside [0, 32767]"));
  CHECK(contains(error_of([&] { c.broadcast(static_cast<float*>(nullptr), 4, 0); }), "null buffer"));
  CHECK(contains(error_of([&] { c.broadcast(d.data(), 4, -1); }), "broadcast root -1"));
  const std::vector<int> outside = {c.rank(), c.size()};
  CHECK(contains(error_of([&] { (void)c.group_of(outside); }), "outside [0, " + std::to_string(c.size()) + ")"));
  CHECK(!c.aborted());
  c.barrier();
}

TEST_CASE("nccl: send, recv and groups with only no_peer issue nothing") {
  nccl_communicator& c = *g_comm;
  auto d = put(c, std::vector<float>(4, 1.0f));
  const auto before = c.ops_issued();
  c.group({send_op(d.data(), 4, no_peer), recv_op(d.data(), 4, no_peer)});
  c.send(d.data(), 4, no_peer);
  c.recv(d.data(), 4, no_peer);
  CHECK(c.ops_issued() == before);
}

// Multi-rank only: rank 0 waits for a message rank 1 never sends.
TEST_CASE("nccl: a missing peer trips the watchdog") {
  nccl_communicator& c = *g_comm;
  if (c.size() == 1) return;
  auto w = c.split(0, c.rank(), "p2p-watchdog");
  w.set_timeout(2s);
  if (w.rank() == 0) {
    auto b = put(w, std::vector<float>(4, 0.0f));
    const std::string msg = error_of([&] {
      w.recv(b.data(), 4, 1);
      w.synchronize();
    });
    MESSAGE("missing peer -> " << msg);
    CHECK(contains(msg, "recv(f32 x 4 from rank 1)"));
    CHECK(contains(msg, "'p2p-watchdog'"));
    // several ranks, bootstrapped over MPI: every rank was asked first (comm/mpi/verdict.hpp)
    CHECK(contains(msg, "watchdog verdict: "));
  }
  w.abort("test over");  // the others never used it; no orderly finalize needed
}

TEST_SUITE_END();

// ---- once per process ------------------------------------------------------------------
TEST_SUITE_BEGIN("nccl process");

TEST_CASE("nccl: single() owns the current device; moves leave a refusing husk") {
  auto a = nccl_communicator::single("moved");
  CHECK((a.size() == 1 && a.rank() == 0));
  int dev = -1;
  cu(cudaGetDevice(&dev), "cudaGetDevice");
  CHECK(a.device() == dev);
  auto b = std::move(a);
  CHECK(b.name() == "moved");
  CHECK(a.size() == 0);  // NOLINT(bugprone-use-after-move): documented state
  CHECK(contains(error_of([&] { a.barrier(); }), "moved-from"));
  auto x = put(b, std::vector<float>(8, 1.5f));
  b.all_reduce(x.data(), 8, reduce_op::sum);
  CHECK(take(b, x.data(), 8)[7] == 1.5f);
  a = std::move(b);  // move-assign into the moved-from object
  CHECK(a.name() == "moved");
  a.barrier();
}

TEST_CASE("nccl: STRATA_NCCL_TIMEOUT_S sets the default timeout; children inherit set_timeout") {
  const char* saved = std::getenv("STRATA_NCCL_TIMEOUT_S");
  const std::string keep = saved ? saved : "";
  setenv("STRATA_NCCL_TIMEOUT_S", "7.5", 1);
  CHECK(nccl_communicator::default_timeout() == 7500ms);
  setenv("STRATA_NCCL_TIMEOUT_S", "42", 1);
  {
    auto c = nccl_communicator::single("timeouts");
    CHECK(c.timeout() == 42s);
    c.set_timeout(3s);
    CHECK(c.split(0, 0).timeout() == 3s);
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

// A recv that nobody matches. On a world of one the peer is this rank; NCCL may
// reject the lone self-recv (invalid usage) or it may wait: either way the result
// must be a comm_error naming the op and the communicator, not a hang.
TEST_CASE("nccl: an unmatched recv trips the watchdog") {
  auto w = nccl_communicator::single("watchdog");
  w.set_timeout(2s);
  auto b = put(w, std::vector<float>(4, 0.0f));
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = error_of([&] {
    w.recv(b.data(), 4, 0);
    w.synchronize();
  });
  const double took = seconds_since(t0);
  MESSAGE("unmatched recv -> after " << took << " s: " << msg);
  CHECK(contains(msg, "recv(f32 x 4 from rank 0)"));
  CHECK(contains(msg, "'watchdog'"));
  CHECK(contains(msg, "op #1"));
  CHECK(took < 30.0);
  CHECK(w.aborted());
  CHECK(contains(error_of([&] { w.all_reduce(b.data(), 4, reduce_op::sum); }), "aborted earlier"));
}

// A genuine timeout: the stream is busy for 3 s ahead of an all_reduce, the watchdog
// allows 1 s.
TEST_CASE("nccl: a stuck stream trips the watchdog") {
  auto w = nccl_communicator::single("stuck");
  w.set_timeout(1s);
  comm_suite::policy::buffer<float> b(4);
  spin_ns<<<1, 1, 0, w.stream()>>>(3'000'000'000ULL);
  cu(cudaGetLastError(), "spin launch");
  w.all_reduce(b.data(), 4, reduce_op::sum);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = error_of([&] { w.synchronize(); });
  const double took = seconds_since(t0);
  MESSAGE("stuck stream -> after " << took << " s: " << msg);
  CHECK(contains(msg, "no operation completed within 1 s"));
  CHECK(contains(msg, "op #1 all_reduce(f32 x 4, sum)"));
  CHECK(contains(msg, "'stuck'"));
  CHECK(contains(msg, "ncclCommAbort"));
  CHECK((took >= 0.9 && took < 60.0));
  CHECK(w.aborted());
  cu(cudaStreamSynchronize(w.stream()), "cudaStreamSynchronize");  // let the spin end
}

TEST_SUITE_END();

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

    doctest::Context ctx;
    int worst = 0;
    // Every rank runs the same test cases in the same order.
    auto run = [&](const char* suites) {
      ctx.clearFilters();
      ctx.applyCommandLine(argc, argv);
      ctx.addFilter("test-suite", suites);
      if (g_rank != 0) ctx.setOption("minimal", true);  // failures only
      worst = std::max(worst, ctx.run());
    };
    const char* per_comm = "communicator conformance,nccl communicator";
    if (all_fit) {
      auto world = nccl_communicator::world(mpi);
      g_comm = &world;
      g_expected_size = mpi.size();
      g_expected_rank = mpi.rank();
      run(per_comm);
      world.barrier();
    } else if (mpi.rank() == 0) {
      std::printf("%d ranks per node but %d CUDA device(s): skipping the multi-rank NCCL world\n", local_size, ndev);
    }
    {
      auto solo = nccl_communicator::single();  // per-rank worlds of one (no MPI involved)
      g_comm = &solo;
      g_expected_size = 1;
      g_expected_rank = 0;
      run(per_comm);
    }
    g_comm = nullptr;
    run("nccl process");

    int total = 0;
    MPI_Allreduce(&worst, &total, 1, MPI_INT, MPI_MAX, mpi.native());
    return total;
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "[rank %d] test_nccl: unexpected exception: %s\n", g_rank, ex.what());
    return 1;
  }
}
