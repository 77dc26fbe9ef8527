// strata host backend: memory, queues, events and the CPU thread pool.
//
// The host backend is the float64-checkable reference: every plan runs on it.
// Its interface (buffer/view/queue/event, kernels taking a queue first and raw
// row-major pointers) is the one a device backend implements with its own
// types, so generic code can be written once against `Backend::...`.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif

namespace strata::backend::host {

// ---------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------

// 64 bytes: a cache line, and the widest SIMD register (AVX-512).
inline constexpr std::size_t alignment = 64;

// Non-owning window onto host memory. A device backend has its own view type,
// so a device pointer can never be handed to a host kernel by accident.
template <class T>
struct view {
  T* ptr = nullptr;
  std::size_t n = 0;

  constexpr T* data() const noexcept { return ptr; }
  constexpr std::size_t size() const noexcept { return n; }
  constexpr bool empty() const noexcept { return n == 0; }
  constexpr T& operator[](std::size_t i) const noexcept { return ptr[i]; }
  constexpr T* begin() const noexcept { return ptr; }
  constexpr T* end() const noexcept { return ptr + n; }

  // Elements [offset, offset + count); throws rather than silently overrunning.
  constexpr view subview(std::size_t offset, std::size_t count) const {
    if (offset > n || count > n - offset) throw std::out_of_range("strata: view::subview out of range");
    return view{ptr + offset, count};
  }
  // view<T> -> view<const T>, never the reverse.
  template <class U = T, class = std::enable_if_t<!std::is_const_v<U>>>
  constexpr operator view<const U>() const noexcept {
    return view<const U>{ptr, n};
  }
};

// Owning, 64-byte aligned, uninitialised (like cudaMalloc) array of a
// trivially copyable T. Move-only: copies of tensors must be explicit kernels.
template <class T>
class buffer {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>,
                "backend buffers hold plain data only (they map onto device memory)");

 public:
  buffer() noexcept = default;
  explicit buffer(std::size_t n) : n_(n) {
    if (n == 0) return;
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    ptr_ = static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{alignment}));
  }
  ~buffer() { release(); }

  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
  buffer(buffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  buffer& operator=(buffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }

  T* data() noexcept { return ptr_; }
  const T* data() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return n_; }
  bool empty() const noexcept { return n_ == 0; }
  std::size_t bytes() const noexcept { return n_ * sizeof(T); }

  // Host memory is directly addressable; device buffers will not offer these.
  T& operator[](std::size_t i) noexcept { return ptr_[i]; }
  const T& operator[](std::size_t i) const noexcept { return ptr_[i]; }
  T* begin() noexcept { return ptr_; }
  T* end() noexcept { return ptr_ + n_; }
  const T* begin() const noexcept { return ptr_; }
  const T* end() const noexcept { return ptr_ + n_; }

  host::view<T> view() noexcept { return {ptr_, n_}; }
  host::view<const T> view() const noexcept { return {ptr_, n_}; }
  operator host::view<T>() noexcept { return view(); }
  operator host::view<const T>() const noexcept { return view(); }

 private:
  void release() noexcept {
    if (ptr_) ::operator delete (ptr_, std::align_val_t{alignment});
    ptr_ = nullptr;
    n_ = 0;
  }
  T* ptr_ = nullptr;
  std::size_t n_ = 0;
};

// ---------------------------------------------------------------------------
// Threads
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Queues and events
// ---------------------------------------------------------------------------

// An ordered stream of work. On the host, work runs to completion inside the
// submitting call, which trivially satisfies in-order semantics; the queue
// carries the execution resources (its thread count) instead.
// Not thread-safe: like a CUDA stream handle, give each host thread its own.
class queue {
 public:
  explicit queue(unsigned threads = default_threads()) : threads_(threads ? threads : 1u) {}
  queue(queue&&) noexcept = default;
  queue& operator=(queue&&) noexcept = default;
  queue(const queue&) = delete;
  queue& operator=(const queue&) = delete;

  unsigned threads() const noexcept { return threads_; }
  // Changing the thread count never changes strata's own kernels' results (see
  // thread_pool); BLAS GEMMs make no such promise (see gemm.hpp).
  void set_threads(unsigned t) {
    t = t ? t : 1u;
    if (t != threads_) pool_.reset();
    threads_ = t;
  }

  // All submitted work has completed by the time submission returns.
  void synchronize() noexcept {}

  // Kernel-side helper: f(i) for i in [0, tasks) on this queue's threads.
  template <class F>
  void parallel_for(std::size_t tasks, F&& f) {
    if (threads_ > 1 && tasks > 1 && !detail::in_pool_task) {
      if (!pool_) pool_ = std::make_unique<thread_pool>(threads_);
      pool_->run(tasks, std::forward<F>(f));
    } else {
      for (std::size_t i = 0; i < tasks; ++i) f(i);
    }
  }

 private:
  unsigned threads_;
  std::unique_ptr<thread_pool> pool_;
};

// A point in a queue's order. Host work is complete once submitted, so every
// event is complete as soon as it is recorded.
struct event {
  const queue* source = nullptr;
};

inline event record(queue& q) noexcept { return event{&q}; }
// Make later work on q wait for e: nothing to wait for on the host.
inline void wait(queue&, const event&) noexcept {}
inline bool query(const event&) noexcept { return true; }
inline void synchronize(const event&) noexcept {}
inline void synchronize(queue& q) noexcept { q.synchronize(); }

}  // namespace strata::backend::host

namespace strata::backend {

// The host backend as a single type, for `template <class Backend>` plans.
struct Host {
  static constexpr const char* name = "host";
  // Memory the CPU can dereference directly (a device backend says false).
  static constexpr bool host_accessible = true;

  template <class T>
  using buffer = host::buffer<T>;
  template <class T>
  using view = host::view<T>;
  using queue = host::queue;
  using event = host::event;

  template <class T>
  static buffer<T> allocate(std::size_t n) {
    return buffer<T>(n);
  }
  static event record(queue& q) noexcept { return host::record(q); }
  static void wait(queue& q, const event& e) noexcept { host::wait(q, e); }
  static bool query(const event& e) noexcept { return host::query(e); }
  static void synchronize(queue& q) noexcept { q.synchronize(); }
  // Whole-device barrier: every host queue is always idle.
  static void synchronize() noexcept {}

  // Host <-> backend memory transfers, mirroring device backends so generic
  // code can stage data the same way; here a plain copy, done on return.
  template <class T>
  static void upload(queue&, const T* host, std::size_t n, T* dst) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (n) std::memmove(dst, host, n * sizeof(T));
  }
  template <class T>
  static void download(queue&, const T* src, std::size_t n, T* host) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (n) std::memmove(host, src, n * sizeof(T));
  }
};

}  // namespace strata::backend
