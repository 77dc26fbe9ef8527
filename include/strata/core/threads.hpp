#pragma once
// CPU threads: the fork-join pool strata's host work runs on (the host backend's
// kernels, the executor's host-side checks), and how many threads a process may use.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif

namespace strata {

// CPUs this process may run on: its affinity mask (what taskset, a launcher's
// binding or a cgroup cpuset left it), else every CPU the machine reports.
inline std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
#endif
  if (cpus.empty()) {
    const unsigned h = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned c = 0; c < h; ++c) cpus.push_back(static_cast<int>(c));
  }
  return cpus;
}

// Threads for a process allowed on `mine` when the processes of its node (itself
// included) are allowed on `node[i]`: a CPU open to k of them counts 1/k for each,
// and the sum is rounded down (at least 1), so ranks bound to their own cores use
// them all and ranks sharing cores split them without oversubscribing.
inline unsigned cpu_share(const std::vector<int>& mine, const std::vector<std::vector<int>>& node) {
  double share = 0.0;
  for (int c : mine) {
    int k = 0;
    for (const auto& other : node) k += std::count(other.begin(), other.end(), c) > 0 ? 1 : 0;
    share += 1.0 / std::max(k, 1);
  }
  return std::max(1u, static_cast<unsigned>(share + 1e-9));
}

// Thread count for new queues: STRATA_HOST_THREADS if it is a positive
// integer, else the CPUs this process may run on (at least 1).
inline unsigned default_threads() {
  if (const char* s = std::getenv("STRATA_HOST_THREADS"); s && *s) {
    char* end = nullptr;
    const long v = std::strtol(s, &end, 10);
    if (end && *end == '\0' && v > 0 && v <= 1024) return static_cast<unsigned>(v);
  }
  return static_cast<unsigned>(allowed_cpus().size());
}

namespace detail {
// Set while a thread executes pool work, so a nested parallel_for runs inline
// instead of deadlocking on its own pool.
inline thread_local bool in_pool_task = false;

// One step of a short busy-wait.
inline void spin_pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}
}  // namespace detail

// Fork-join pool: run(tasks, f) calls f(i) once for every i in [0, tasks),
// spread over the caller plus (threads - 1) persistent workers, and returns
// when all calls finished. Which thread runs which i is unspecified, so
// kernels give each output element to exactly one task and keep per-element
// arithmetic independent of the split: results are then bit-identical for
// any thread count.
//
// A training step is a string of short parallel kernels: waking a sleeping
// worker through the kernel costs tens of microseconds on a VM, as much as a
// small GEMM. So a worker (and the caller waiting for it) spins for a short
// while before it sleeps; kernels that follow each other find it awake.
class thread_pool {
 public:
  // Busy-wait iterations (a pause each, ~20-40 µs in all) before sleeping.
  static constexpr int spin_iterations = 2000;

  explicit thread_pool(unsigned threads) : threads_(threads ? threads : 1u) {
    workers_.reserve(threads_ - 1);
    for (unsigned i = 1; i < threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
  }
  ~thread_pool() {
    {
      std::lock_guard<std::mutex> lk(m_);
      stop_.store(true);
    }
    start_cv_.notify_all();
    for (auto& w : workers_) w.join();
  }
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  unsigned size() const noexcept { return threads_; }

  template <class F>
  void run(std::size_t tasks, F&& f) {
    if (tasks == 0) return;
    if (tasks == 1 || threads_ == 1 || detail::in_pool_task) {
      for (std::size_t i = 0; i < tasks; ++i) f(i);
      return;
    }
    std::lock_guard<std::mutex> serial(run_m_);  // one job at a time per pool
    using Fn = std::remove_reference_t<F>;
    job j;
    j.invoke = [](void* ctx, std::size_t i) { (*static_cast<Fn*>(ctx))(i); };
    j.ctx = static_cast<void*>(&f);
    j.tasks = tasks;
    {
      std::lock_guard<std::mutex> lk(m_);
      job_.store(&j);
      busy_.store(static_cast<unsigned>(workers_.size()));
      generation_.fetch_add(1);  // published last: a spinning worker then sees job_
    }
    start_cv_.notify_all();
    execute(j);
    for (int i = 0; i < spin_iterations && busy_.load() != 0; ++i) detail::spin_pause();
    if (busy_.load() != 0) {
      std::unique_lock<std::mutex> lk(m_);
      done_cv_.wait(lk, [&] { return busy_.load() == 0; });
    }
    job_.store(nullptr);
    if (j.error) std::rethrow_exception(j.error);
  }

 private:
  struct job {
    void (*invoke)(void*, std::size_t) = nullptr;
    void* ctx = nullptr;
    std::size_t tasks = 0;
    std::atomic<std::size_t> next{0};
    std::atomic<bool> failed{false};
    std::exception_ptr error;  // written once, by the thread that set `failed`
  };

  static void execute(job& j) {
    detail::in_pool_task = true;
    for (;;) {
      const std::size_t i = j.next.fetch_add(1, std::memory_order_relaxed);
      if (i >= j.tasks) break;
      if (j.failed.load(std::memory_order_relaxed)) continue;  // drain quickly after an error
      try {
        j.invoke(j.ctx, i);
      } catch (...) {
        if (!j.failed.exchange(true)) j.error = std::current_exception();
      }
    }
    detail::in_pool_task = false;
  }

  void worker_loop() {
    std::uint64_t seen = 0;
    for (;;) {
      for (int i = 0; i < spin_iterations && generation_.load() == seen && !stop_.load(); ++i) detail::spin_pause();
      if (generation_.load() == seen) {
        std::unique_lock<std::mutex> lk(m_);
        start_cv_.wait(lk, [&] { return stop_.load() || generation_.load() != seen; });
      }
      if (stop_.load()) return;
      seen = generation_.load();
      execute(*job_.load());
      if (busy_.fetch_sub(1) == 1) {
        std::lock_guard<std::mutex> lk(m_);  // the caller may be between its check and its wait
        done_cv_.notify_one();
      }
    }
  }

  unsigned threads_;
  std::vector<std::thread> workers_;
  std::mutex run_m_;
  std::mutex m_;
  std::condition_variable start_cv_, done_cv_;
  std::atomic<job*> job_{nullptr};
  std::atomic<unsigned> busy_{0};
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace strata
