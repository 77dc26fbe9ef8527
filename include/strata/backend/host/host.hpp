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

#include "strata/core/threads.hpp"


namespace strata::backend::host {

// ---------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------

// 64 bytes: a cache line, and the widest SIMD register (AVX-512).
inline constexpr std::size_t alignment = 64;

namespace detail {
inline std::atomic<long long> allocations{0};
}  // namespace detail

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
    allocation_count().fetch_add(1, std::memory_order_relaxed);
  }
  // Buffers this process has allocated (tests check that a step allocates none).
  static std::atomic<long long>& allocation_count() noexcept { return detail::allocations; }
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

