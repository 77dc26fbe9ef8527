// Host backend plumbing: buffers, views, queues/events, the thread pool.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/backend/host/backend.hpp"

namespace {

using strata::backend::Host;
namespace host = strata::backend::host;

// Restores an environment variable when the test ends.
struct env_guard {
  std::string name;
  bool had = false;
  std::string old;
  explicit env_guard(const char* n) : name(n) {
    if (const char* v = std::getenv(n)) had = true, old = v;
  }
  ~env_guard() {
    if (had)
      ::setenv(name.c_str(), old.c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
};

}  // namespace

TEST_CASE("host backend: buffer is aligned, sized, move-only") {
  static_assert(!std::is_copy_constructible_v<Host::buffer<float>>);
  static_assert(!std::is_copy_assignable_v<Host::buffer<float>>);
  static_assert(std::is_nothrow_move_constructible_v<Host::buffer<float>>);
  static_assert(std::is_nothrow_move_assignable_v<Host::buffer<float>>);

  for (std::size_t n : {1u, 3u, 17u, 1000u, 65537u}) {
    auto b = Host::allocate<float>(n);
    CHECK(b.size() == n);
    CHECK(b.bytes() == n * sizeof(float));
    REQUIRE(b.data() != nullptr);
    CHECK(reinterpret_cast<std::uintptr_t>(b.data()) % host::alignment == 0);
    for (std::size_t i = 0; i < n; ++i) b[i] = float(i);  // whole range writable
    CHECK(b[n - 1] == float(n - 1));
  }

  Host::buffer<double> empty = Host::allocate<double>(0);
  CHECK(empty.empty());
  CHECK(empty.data() == nullptr);

  auto a = Host::allocate<int>(10);
  int* p = a.data();
  Host::buffer<int> moved(std::move(a));
  CHECK(moved.data() == p);
  CHECK(moved.size() == 10);
  CHECK(a.data() == nullptr);  // NOLINT(bugprone-use-after-move): moved-from state is specified
  CHECK(a.size() == 0);

  Host::buffer<int> other = Host::allocate<int>(3);
  other = std::move(moved);
  CHECK(other.data() == p);
  CHECK(other.size() == 10);
  other = Host::buffer<int>();
  CHECK(other.empty());
}

TEST_CASE("host backend: views are non-owning windows with checked subviews") {
  auto b = Host::allocate<float>(8);
  for (std::size_t i = 0; i < 8; ++i) b[i] = float(i);
  Host::view<float> v = b;
  CHECK(v.data() == b.data());
  CHECK(v.size() == 8);
  Host::view<const float> cv = v;  // T -> const T converts implicitly
  CHECK(cv[3] == 3.0f);
  static_assert(!std::is_convertible_v<Host::view<const float>, Host::view<float>>);

  auto s = v.subview(2, 4);
  CHECK(s.data() == b.data() + 2);
  CHECK(s.size() == 4);
  CHECK(s[0] == 2.0f);
  CHECK(v.subview(8, 0).empty());
  CHECK_THROWS_AS((void)v.subview(5, 4), std::out_of_range);
  CHECK_THROWS_AS((void)v.subview(9, 0), std::out_of_range);

  float sum = 0;
  for (float x : s) sum += x;
  CHECK(sum == 2 + 3 + 4 + 5);
}

TEST_CASE("host backend: queue and event API is complete and trivially ordered") {
  Host::queue q(2);
  CHECK(q.threads() == 2);
  Host::event e = Host::record(q);
  CHECK(Host::query(e));
  CHECK(e.source == &q);
  Host::queue q2(1);
  Host::wait(q2, e);  // cross-queue dependency: a no-op on the host
  Host::synchronize(q);
  Host::synchronize();
  host::synchronize(e);

  // ADL finds the free functions from the queue type alone, as generic code
  // written against a backend will call them.
  auto e2 = record(q2);
  wait(q, e2);
  CHECK(query(e2));

  q.set_threads(0);  // clamps to 1
  CHECK(q.threads() == 1);
  Host::queue moved(std::move(q2));
  CHECK(moved.threads() == 1);
}

TEST_CASE("host backend: STRATA_HOST_THREADS overrides the default thread count") {
  env_guard g("STRATA_HOST_THREADS");
  ::setenv("STRATA_HOST_THREADS", "3", 1);
  CHECK(host::default_threads() == 3);
  CHECK(Host::queue().threads() == 3);
  for (const char* bad : {"0", "-2", "abc", "4x", ""}) {
    ::setenv("STRATA_HOST_THREADS", bad, 1);
    CHECK(host::default_threads() == host::allowed_cpus().size());
  }
}

TEST_CASE("host backend: the default thread count is the CPUs this process may use") {
  env_guard g("STRATA_HOST_THREADS");
  ::unsetenv("STRATA_HOST_THREADS");
  const auto cpus = host::allowed_cpus();
  REQUIRE(!cpus.empty());
  CHECK(cpus.size() <= std::max(1u, std::thread::hardware_concurrency()));
  CHECK(host::default_threads() == cpus.size());
}

TEST_CASE("host backend: a rank's share of its node's CPUs") {
  using V = std::vector<int>;
  // one process on 2 CPUs uses both
  CHECK(host::cpu_share(V{0, 1}, {V{0, 1}}) == 2);
  // 4 ranks unbound on 2 CPUs (srun with task/none, mpirun --oversubscribe): 1 each, never 0
  CHECK(host::cpu_share(V{0, 1}, {V{0, 1}, V{0, 1}, V{0, 1}, V{0, 1}}) == 1);
  // 2 ranks bound to a core each: one thread each
  CHECK(host::cpu_share(V{1}, {V{0}, V{1}}) == 1);
  // 3 ranks sharing 8 CPUs: 8/3 rounded down, no oversubscription
  const V all{0, 1, 2, 3, 4, 5, 6, 7};
  CHECK(host::cpu_share(all, {all, all, all}) == 2);
  // 2 ranks bound to a socket each (4 CPUs), 2 more sharing the whole node
  const V s0{0, 1, 2, 3}, s1{4, 5, 6, 7};
  CHECK(host::cpu_share(s0, {s0, s1, all, all}) == 1);  // 4 CPUs shared 3 ways
  CHECK(host::cpu_share(V{0, 1, 2, 3, 4, 5}, {V{0, 1, 2, 3, 4, 5}, V{6, 7}}) == 6);
}

TEST_CASE("host backend: parallel_for runs every task exactly once") {
  for (unsigned threads : {1u, 2u, 3u, 8u}) {
    Host::queue q(threads);
    for (std::size_t tasks : {0u, 1u, 2u, 7u, 1000u}) {
      std::vector<std::atomic<int>> hits(tasks);
      for (int rep = 0; rep < 3; ++rep) q.parallel_for(tasks, [&](std::size_t i) { hits[i].fetch_add(1); });
      for (std::size_t i = 0; i < tasks; ++i) CHECK(hits[i].load() == 3);
    }
  }
}

TEST_CASE("host backend: parallel_for uses several threads when asked") {
  Host::queue q(2);
  std::atomic<int> inside{0}, peak{0};
  // Each task waits (up to ~10 s, for loaded CI machines) for a partner, so
  // the two tasks must overlap on two threads.
  q.parallel_for(2, [&](std::size_t) {
    const int now = ++inside;
    int p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
    for (int spin = 0; spin < 100000 && peak.load() < 2; ++spin)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    --inside;
  });
  CHECK(peak.load() == 2);
}

TEST_CASE("host backend: exceptions in tasks reach the caller; the pool survives") {
  Host::queue q(2);
  CHECK_THROWS_AS(q.parallel_for(100,
                                 [&](std::size_t i) {
                                   if (i == 37) throw std::runtime_error("task 37");
                                 }),
                  std::runtime_error);
  std::atomic<int> n{0};
  q.parallel_for(50, [&](std::size_t) { ++n; });
  CHECK(n.load() == 50);
}

TEST_CASE("host backend: nested parallel_for runs inline instead of deadlocking") {
  Host::queue q(2);
  std::atomic<int> n{0};
  q.parallel_for(4, [&](std::size_t) { q.parallel_for(5, [&](std::size_t) { ++n; }); });
  CHECK(n.load() == 20);
}

TEST_CASE("host backend: queues on different threads run concurrently and independently") {
  std::atomic<long> total{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 3; ++t)
    ts.emplace_back([&] {
      Host::queue q(2);  // one queue per host thread, like one stream per rank
      for (int rep = 0; rep < 50; ++rep) q.parallel_for(16, [&](std::size_t i) { total += long(i); });
    });
  for (auto& t : ts) t.join();
  CHECK(total.load() == 3L * 50 * (15 * 16 / 2));
}

TEST_CASE("host backend: upload/download copy like a device backend's transfers") {
  Host::queue q(1);
  const std::vector<float> src = {1.f, 2.f, 3.f, 4.f};
  auto dev = Host::allocate<float>(src.size());
  Host::upload(q, src.data(), src.size(), dev.data());
  std::vector<float> back(src.size(), 0.f);
  Host::download(q, dev.data(), dev.size(), back.data());
  Host::synchronize(q);
  CHECK(back == src);
  Host::upload(q, src.data(), 0, static_cast<float*>(nullptr));  // n == 0 touches nothing
}
