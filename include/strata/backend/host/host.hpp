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

#include "strata/backend/buffer.hpp"
#include "strata/backend/dispatch.hpp"
#include "strata/core/threads.hpp"

namespace strata::backend::host {

// The kernel fronts (backend/<family>.hpp) under this namespace's name too: host::gemm(q, ...).
using namespace kernels;

// ---------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------

// 64 bytes: a cache line, and the widest SIMD register (AVX-512).
inline constexpr std::size_t alignment = 64;

// Host memory: 64-byte aligned operator new, counted.
struct host_space {
  static constexpr bool host_accessible = true;
  static void* allocate(std::size_t bytes) {
    void* p = ::operator new (bytes, std::align_val_t{alignment});
    allocation_count().fetch_add(1, std::memory_order_relaxed);
    return p;
  }
  static void deallocate(void* p) noexcept { ::operator delete (p, std::align_val_t{alignment}); }
  static std::atomic<long long>& allocation_count() noexcept {
    static std::atomic<long long> count{0};
    return count;
  }
};

// Non-owning window onto host memory. A device backend has its own view type,
// so a device pointer can never be handed to a host kernel by accident.
template <class T>
using view = backend::view<T, host_space>;
// Owning, 64-byte aligned, uninitialised (like cudaMalloc), move-only.
template <class T>
using buffer = backend::buffer<T, host_space>;

// ---------------------------------------------------------------------------
// Threads
// ---------------------------------------------------------------------------

// The CPU thread helpers live in strata/core/threads.hpp (the executor's host-side
// work uses them too); the host backend's names for them:
using strata::allowed_cpus;
using strata::cpu_share;
using strata::default_threads;
using strata::thread_pool;
namespace detail {
using strata::detail::in_pool_task;
}  // namespace detail

// ---------------------------------------------------------------------------
// Queues and events
// ---------------------------------------------------------------------------

// An ordered stream of work. On the host, work runs to completion inside the
// submitting call, which trivially satisfies in-order semantics; the queue
// carries the execution resources (its thread count) instead.
// Not thread-safe: like a CUDA stream handle, give each host thread its own.
class queue : public queue_base {
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

