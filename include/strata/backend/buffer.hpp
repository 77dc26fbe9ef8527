#pragma once
// buffer<T, Space>: the one owning array of every backend, uninitialised and move-only
// (copies of tensors must be explicit kernels). The memory space says where it lives:
//
//   struct Space {
//     static constexpr bool host_accessible;       // may the CPU dereference it
//     static void* allocate(std::size_t bytes);    // throws on failure
//     static void deallocate(void* p) noexcept;
//     static auto& allocation_count() noexcept;    // optional: allocations made, for tests
//   };
//
// host::host_space (aligned operator new), cuda::device_space (cudaMalloc) and
// cuda::pinned_space (cudaMallocHost); each backend names its buffers with aliases
// (host::buffer<T>, cuda::buffer<T>, cuda::pinned_buffer<T>, Backend::buffer<T>).
#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

#include "strata/backend/view.hpp"

namespace strata::backend {

template <class T, class Space>
class buffer {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>,
                "backend buffers hold plain data only (they map onto device memory)");

 public:
  using value_type = T;
  using space = Space;

  buffer() noexcept = default;
  explicit buffer(std::size_t n) : n_(n) {
    if (n == 0) return;
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    ptr_ = static_cast<T*>(Space::allocate(n * sizeof(T)));
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

  // Buffers of this space the process has allocated (tests check that a step allocates none).
  static auto& allocation_count() noexcept
    requires requires { Space::allocation_count(); }
  {
    return Space::allocation_count();
  }

  T* data() noexcept { return ptr_; }
  const T* data() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return n_; }
  bool empty() const noexcept { return n_ == 0; }
  std::size_t bytes() const noexcept { return n_ * sizeof(T); }

  // Host-accessible memory only: device buffers are reached through kernels and transfers.
  T& operator[](std::size_t i) noexcept
    requires Space::host_accessible
  {
    return ptr_[i];
  }
  const T& operator[](std::size_t i) const noexcept
    requires Space::host_accessible
  {
    return ptr_[i];
  }
  T* begin() noexcept
    requires Space::host_accessible
  {
    return ptr_;
  }
  T* end() noexcept
    requires Space::host_accessible
  {
    return ptr_ + n_;
  }
  const T* begin() const noexcept
    requires Space::host_accessible
  {
    return ptr_;
  }
  const T* end() const noexcept
    requires Space::host_accessible
  {
    return ptr_ + n_;
  }

  backend::view<T, Space> view() noexcept { return {ptr_, n_}; }
  backend::view<const T, Space> view() const noexcept { return {ptr_, n_}; }
  operator backend::view<T, Space>() noexcept { return view(); }
  operator backend::view<const T, Space>() const noexcept { return view(); }

 private:
  void release() noexcept {
    if (ptr_) Space::deallocate(ptr_);
    ptr_ = nullptr;
    n_ = 0;
  }
  T* ptr_ = nullptr;
  std::size_t n_ = 0;
};

}  // namespace strata::backend
